//! `tailctl thresholds` end to end: the digest's example table, the loadable
//! output file, and clear errors for malformed input.

use std::process::Command;

use tailctl_rt::threshold::ThresholdTable;

fn tailctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tailctl"))
        .args(args)
        .output()
        .expect("run tailctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const EXAMPLE: [&str; 9] = [
    "thresholds",
    "--work",
    "lognormal:10,13",
    "--target",
    "20.6ms",
    "--rps",
    "1200",
    "--cores",
    "16",
];

#[test]
fn digest_example_as_json() {
    let mut args = EXAMPLE.to_vec();
    args.extend(["--q-max", "40", "--json"]);
    let (ok, out, err) = tailctl(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // No serialization up to q ≈ 12, then thresholds fall to ~31 ms by q ≈ 28.
    let first = v["first_serializing_q"].as_u64().unwrap();
    assert!((11..=14).contains(&first), "{first}");
    let t = v["thresholds_ms"].as_array().unwrap();
    assert_eq!(t.len(), 40);
    assert!(t[0].is_null());
    let l28 = t[27].as_f64().unwrap();
    assert!((27.0..=35.0).contains(&l28), "{l28}");
}

#[test]
fn text_and_file_output_are_loadable() {
    let dir = std::env::temp_dir().join(format!("tailctl-thresholds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("table.txt");
    let mut args = EXAMPLE.to_vec();
    let f = file.to_str().unwrap().to_string();
    args.extend(["-o", &f]);
    let (ok, out, err) = tailctl(&args);
    assert!(ok, "{err}");
    let from_stdout = ThresholdTable::parse(&out).unwrap();
    let from_file = ThresholdTable::load(&file).unwrap();
    assert_eq!(from_stdout, from_file);
    assert_eq!(from_file.lookup(1), None);
    assert!(from_file.lookup(1000).is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn histogram_file_input() {
    let dir = std::env::temp_dir().join(format!("tailctl-hist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.csv");
    std::fs::write(&good, "work,probability\n10ms,0.9\n100ms,0.1\n").unwrap();
    let g = good.to_str().unwrap();
    let (ok, out, err) = tailctl(&[
        "thresholds",
        "--work",
        g,
        "--target",
        "30ms",
        "--rps",
        "100",
        "--cores",
        "4",
        "--q-max",
        "6",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Hand-computed in the runtime's tests: never at q = 1, 10 ms at q = 5.
    assert!(v["thresholds_ms"][0].is_null());
    assert_eq!(v["thresholds_ms"][4].as_f64(), Some(10.0));

    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "10ms,0.5\n5ms,0.5\n").unwrap();
    let (ok, _, err) = tailctl(&[
        "thresholds",
        "--work",
        bad.to_str().unwrap(),
        "--target",
        "30ms",
        "--rps",
        "100",
        "--cores",
        "4",
    ]);
    assert!(!ok);
    assert!(err.contains("line 2"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_input_names_the_problem() {
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "thresholds",
                "--work",
                "lognormal:10",
                "--target",
                "20ms",
                "--rps",
                "1",
                "--cores",
                "1",
            ],
            "MEAN_MS,SD_MS",
        ),
        (
            &[
                "thresholds",
                "--work",
                "lognormal:10,13",
                "--target",
                "20",
                "--rps",
                "1",
                "--cores",
                "1",
            ],
            "unit",
        ),
        (
            &[
                "thresholds",
                "--work",
                "lognormal:10,13",
                "--target",
                "20ms",
                "--rps",
                "2000",
                "--cores",
                "16",
            ],
            "overloaded",
        ),
        (
            &[
                "thresholds",
                "--work",
                "lognormal:10,13",
                "--target",
                "20ms",
                "--rps",
                "100",
                "--cores",
                "0",
            ],
            "cores",
        ),
        (
            &[
                "thresholds",
                "--work",
                "lognormal:10,13",
                "--target",
                "20ms",
                "--rps",
                "-5",
                "--cores",
                "4",
            ],
            "rps",
        ),
        (
            &[
                "thresholds",
                "--work",
                "/no/such/histogram",
                "--target",
                "20ms",
                "--rps",
                "5",
                "--cores",
                "4",
            ],
            "no such file",
        ),
    ];
    for (args, needle) in cases {
        let (ok, _, err) = tailctl(args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
}
