//! tailctl-workloads: everything needed to reproduce the tail-control paper's
//! evaluation (Li et al., PPoPP'16, §5) against `tailctl-rt`, over a real socket.
//!
//! Design: the pieces are small, independent modules so that each can be
//! tested on its own and reused by the three binaries:
//!
//! | module | concept |
//! |---|---|
//! | [`distributions`] | the paper's work distributions (log-normal, Bing-like, finance-like, from a file) as [`tailctl_rt::distribution::WorkDistribution`] |
//! | [`arrival`] | open-loop arrival processes (Poisson, log-normal inter-arrival) |
//! | [`kernel`] | request kernels (Black-Scholes PDE, synthetic spin), the sub-linear variant, calibration |
//! | [`trace`] | a seeded, replayable request trace and its file format |
//! | [`protocol`] | the line-based wire protocol between load generator and server |
//! | [`server`] | the TCP service that runs each request on a `tailctl-rt` pool |
//! | [`registration`] | the (future) hook where the server registers with `scx_tailctl` |
//! | [`loadgen`] | the open-loop load generator engine (separate sender and receiver) |
//! | [`stats`] | latency summaries: HDR percentiles, miss ratios |
//! | [`kv`] | a memcached-like key-value service with background compaction, for priority levels (`tailctl-kv`) |
//! | [`jobserver`] | a job server (matrix multiply > fib > sort > Smith-Waterman) at four priority levels (`tailctl-jobserver`) |
//! | [`priowire`] | what [`kv`] and [`jobserver`] share on the wire: the server's pool, accept and connection loops, the open-loop client |
//! | [`priobench`] | the command-line plumbing `tailctl-kv` and `tailctl-jobserver` share: bench processes, output files, replot |
//! | [`plot`] | chart pieces the SVG plots share: group labels, the log-scale bar chart, the legend |
//! | [`jobs`] | parallel jobs arriving over time for the core-allotment experiment (`tailctl-jobs`) |
//! | [`experiment`] | the paper-style comparison: targets from steal-first, tables, plots |
//!
//! The binaries `tailctl-server`, `tailctl-loadgen` and `tailctl-experiment`
//! are thin command-line layers over these modules; see `workloads/README.md`.

#![warn(missing_docs)]

pub mod arrival;
pub mod distributions;
pub mod experiment;
pub mod jobs;
pub mod jobserver;
pub mod kernel;
pub mod kv;
pub mod loadgen;
pub mod output;
pub mod plot;
pub mod priobench;
pub mod priowire;
pub mod protocol;
pub mod registration;
pub mod schedstat;
pub mod scx;
pub mod server;
pub mod stats;
pub mod trace;
