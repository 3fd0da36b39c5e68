//! The libbpf-rs skeleton generated from `bpf/main.bpf.c` by build.rs.
include!(concat!(env!("OUT_DIR"), "/bpf_skel.rs"));
