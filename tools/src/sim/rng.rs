//! A small, fast, seedable PRNG for the simulators.
//!
//! Design: xoshiro256++ seeded through splitmix64, written out here (20 lines)
//! instead of pulling `rand`: the simulators need reproducible streams (same
//! seed → same run on every platform and every `rand` version), cheap uniform,
//! exponential and normal variates, and independent sub-streams (`fork`) so
//! that e.g. the arrival stream does not change when the work stream does.

/// xoshiro256++ (Blackman & Vigna), period 2^256 − 1.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator from a 64-bit seed.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        Self {
            s: [
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
            ],
        }
    }

    /// An independent stream derived from `seed` and a stream label.
    pub fn stream(seed: u64, label: u64) -> Self {
        Self::new(seed ^ label.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)`, 53 bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `(0, 1]` (safe for `ln`).
    #[inline]
    pub fn uniform_pos(&mut self) -> f64 {
        1.0 - self.uniform()
    }

    /// Uniform integer in `0..n` (`n > 0`), by multiply-shift (bias < 2^-32 for small n).
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Exponential with the given rate.
    #[inline]
    pub fn exp(&mut self, rate: f64) -> f64 {
        -self.uniform_pos().ln() / rate
    }

    /// Standard normal (Box–Muller; one of the pair is dropped for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform_pos();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_well_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 200_000;
        let mut r = Rng::new(1);
        let (mut s, mut s2, mut e) = (0.0, 0.0, 0.0);
        let mut counts = [0usize; 5];
        for _ in 0..n {
            let z = r.normal();
            s += z;
            s2 += z * z;
            e += r.exp(2.0);
            counts[r.below(5)] += 1;
        }
        let n = n as f64;
        assert!((s / n).abs() < 0.01);
        assert!((s2 / n - 1.0).abs() < 0.02);
        assert!((e / n - 0.5).abs() < 0.01);
        assert!(counts.iter().all(|&c| (c as f64 / n - 0.2).abs() < 0.01));
    }
}
