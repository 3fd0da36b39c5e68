//! Host-side checks of scx_tailctl's command line and its refusals. The
//! scheduler itself is exercised in a sched_ext kernel by tools/vm/guest-tests.sh.

use std::path::Path;
use std::process::Command;

fn scx_tailctl(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_scx_tailctl"))
        .args(args)
        .output()
        .expect("running scx_tailctl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn help_lists_the_scheduler_flags() {
    let (rc, text) = scx_tailctl(&["--help"]);
    assert_eq!(rc, 0, "{text}");
    for flag in [
        "--slice-us",
        "--partial",
        "--stats",
        "--monitor",
        "--pin-dir",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}:\n{text}");
    }
}

#[test]
fn out_of_range_slice_is_rejected_before_loading() {
    let (rc, text) = scx_tailctl(&["--slice-us", "0"]);
    assert_ne!(rc, 0);
    assert!(text.contains("--slice-us"), "{text}");
}

#[test]
fn a_kernel_without_sched_ext_gets_a_clear_error() {
    if Path::new("/sys/kernel/sched_ext/state").exists() {
        // This host can load schedulers; the guest tests cover the refusal of a
        // second instance there instead.
        eprintln!("host has sched_ext; checked in the guest tests instead");
        return;
    }
    let (rc, text) = scx_tailctl(&[]);
    assert_ne!(rc, 0, "{text}");
    assert!(text.contains("has no sched_ext"), "{text}");
    assert!(text.contains("tailctl vm run"), "{text}");
}
