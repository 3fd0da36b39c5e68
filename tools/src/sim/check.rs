//! Argument checks that `sim compare`/`capacity` and `sim multiprog` share.
//!
//! Design: each check returns the error the command prints, worded once here,
//! so the subcommands reject bad flags with the same messages.

use anyhow::{bail, Result};

/// Parses each of `names` (trimmed) with `parse` and keeps the first of each
/// policy, in order; an empty result is an error.
pub(crate) fn policies<T: PartialEq>(
    names: &[String],
    parse: impl Fn(&str) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for p in names {
        let k = parse(p.trim())?;
        if !out.contains(&k) {
            out.push(k);
        }
    }
    if out.is_empty() {
        bail!("no policies given");
    }
    Ok(out)
}

/// `flag` (a count) must be at least one.
pub(crate) fn at_least_one(n: u64, flag: &str) -> Result<()> {
    if n == 0 {
        bail!("{flag} must be ≥ 1");
    }
    Ok(())
}

/// `flag`'s value must be a finite number > 0.
pub(crate) fn positive_finite(x: f64, flag: &str) -> Result<()> {
    if !(x.is_finite() && x > 0.0) {
        bail!("{flag} must be a finite number > 0, got {x}");
    }
    Ok(())
}

/// The warm-up must leave something to measure: `--warmup` below the `total`
/// given by `total_flag` (which must be at least one).
pub(crate) fn warmup_below(warmup: usize, total: usize, total_flag: &str) -> Result<()> {
    at_least_one(total as u64, total_flag)?;
    if warmup >= total {
        bail!("--warmup must be below {total_flag}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_finite_rejects_nan_infinity_and_non_positive() {
        assert!(positive_finite(5.0, "--resolution").is_ok());
        for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0] {
            let e = positive_finite(bad, "--resolution").unwrap_err();
            assert!(e.to_string().contains("--resolution"), "{e}");
        }
    }
}
