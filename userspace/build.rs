// Compiles bpf/main.bpf.c into a skeleton and generates Rust bindings for
// bpf/intf.h, the one definition of the structs shared with the kernel side.
fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("BpfBuilder::new (is clang >= 17 installed? BPF_CLANG selects it)")
        .enable_intf("../bpf/intf.h", "bpf_intf.rs")
        .enable_skel("../bpf/main.bpf.c", "bpf")
        .build()
        .expect("building the BPF scheduler failed");
}
