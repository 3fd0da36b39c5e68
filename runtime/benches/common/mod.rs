//! What `benches/overhead.rs` and the profiling probes in `examples/` share,
//! so a probe measures exactly the benchmark's pool and work (the probes
//! include this file with `#[path]`).

use std::hint::black_box;
use std::time::Duration;
use tailctl_rt::{threshold::ThresholdTable, Policy, Pool};

/// Our pool as the benchmark builds it: tail-control with its bookkeeping on
/// (a threshold no request reaches), or steal-first with bookkeeping off.
pub fn ours(workers: usize, tc: bool) -> Pool {
    let b = Pool::builder().workers(workers);
    if tc {
        b.policy(Policy::TailControl)
            .bookkeeping(true)
            .thresholds(ThresholdTable::from_thresholds(vec![Some(
                Duration::from_secs(3600),
            )]))
            .build()
            .unwrap()
    } else {
        b.policy(Policy::StealFirst)
            .bookkeeping(false)
            .build()
            .unwrap()
    }
}

/// Work of one small spawn or request: a few dozen cycles.
#[inline(never)]
pub fn small_work(i: u64) -> u64 {
    let mut x = black_box(i);
    for _ in 0..16 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
    }
    x
}

/// One outside submitter's batch on rayon, as the `submit` row runs it:
/// `per` tiny jobs spawned, each sending its result back over a channel,
/// then all `per` results received (rayon's spawn has no handle).
pub fn rayon_submit_batch(ray: &rayon::ThreadPool, per: u64, t: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..per {
        let tx = tx.clone();
        ray.spawn(move || tx.send(small_work(i * 7 + t)).unwrap());
    }
    for _ in 0..per {
        black_box(rx.recv().unwrap());
    }
}
