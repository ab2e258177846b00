//! A tiny deterministic PRNG (SplitMix64). The simulator needs repeatable, fast, decent
//! quality numbers, not cryptography; one `u64` of state keeps runs reproducible from the
//! scenario seed and costs no dependency.

#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); Lemire's multiply-shift, bias negligible for our ranges.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: f64) -> bool {
        if percent >= 100.0 {
            return true;
        }
        if percent <= 0.0 {
            return false;
        }
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 100.0 < percent
    }
}
