//! `tailctl maps` and `tailctl top` must say what is wrong when the scheduler's
//! pins are not there, instead of a bare errno: these run the real binary on
//! the host (no sched_ext needed), pointing it at a pin directory that does
//! not exist.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tailctl"))
        .args(args)
        .output()
        .expect("running tailctl");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), text)
}

#[test]
fn missing_pins_are_explained() {
    for args in [
        &["maps", "--pin-dir", "/nonexistent/tailctl", "list"][..],
        &[
            "maps",
            "--pin-dir",
            "/nonexistent/tailctl",
            "dump",
            "services",
        ][..],
        &["top", "--pin-dir", "/nonexistent/tailctl", "--once"][..],
    ] {
        let (ok, err) = run(args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains("/nonexistent/tailctl"), "{args:?}: {err}");
        assert!(
            err.contains("scx_tailctl is not running") || err.contains("scx_tailctl is loaded"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn unknown_map_id_is_explained() {
    // Id 0 is never a map; non-root callers get the privilege sentence instead.
    let (ok, err) = run(&["maps", "show", "4294967295"]);
    assert!(!ok);
    assert!(
        err.contains("no BPF map with id") || err.contains("root") || err.contains("map id"),
        "{err}"
    );
}
