//! tailctl-rt: a work-stealing runtime for interactive, request-parallel services.
//!
//! Each request runs as a parallel computation on a pool of workers. The pool's
//! policy decides, when a worker runs out of local work, whether it steals or
//! admits a new request; tail-control serializes large requests so that as many
//! requests as possible meet a target latency (Li et al., PPoPP'16).

pub mod distribution;
pub mod threshold;
