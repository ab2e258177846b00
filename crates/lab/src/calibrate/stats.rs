//! Pure statistics of the calibration: medians, their distribution-free intervals from
//! order statistics, paired changes, and the seeded shuffle of the interleaving order.

/// The median (mean of the two middle values for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// P(X <= k) for X ~ Binomial(n, 1/2).
fn binom_half_cdf(n: usize, k: usize) -> f64 {
    let mut c = 1.0f64; // C(n, 0)
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            c = c * (n - i + 1) as f64 / i as f64;
        }
        sum += c;
    }
    sum / 2f64.powi(n as i32)
}

/// A distribution-free interval for the median from order statistics: the narrowest
/// [x(k), x(n+1-k)] whose coverage 1 - 2 P(Bin(n, 1/2) <= k-1) is at least `level`
/// (e.g. 0.95). Returns (low, high, coverage achieved). With too few values for the
/// level (n < 6 at 95%), the range [min, max] and its lower coverage.
pub fn median_ci(xs: &[f64], level: f64) -> (f64, f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0.0);
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let coverage = |k: usize| 1.0 - 2.0 * binom_half_cdf(n, k - 1);
    let mut k = 1;
    while k < n.div_ceil(2) && coverage(k + 1) >= level {
        k += 1;
    }
    let cov = if n == 1 { 0.0 } else { coverage(k) };
    (v[k - 1], v[n - k], cov)
}

/// Per-repetition change of `b` against the reference `a`, percent.
pub fn paired_change_percent(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(x, _)| **x > 0.0)
        .map(|(x, y)| (y / x - 1.0) * 100.0)
        .collect()
}

/// A median with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    pub coverage: f64,
}

pub fn estimate(xs: &[f64]) -> Estimate {
    estimate_at(xs, 0.95)
}

/// The median with the narrowest order-statistic interval of at least `level` coverage.
pub fn estimate_at(xs: &[f64], level: f64) -> Estimate {
    let (low, high, coverage) = median_ci(xs, level);
    Estimate {
        median: median(xs),
        low,
        high,
        coverage,
    }
}

/// Fisher-Yates shuffle driven by a seeded SplitMix64: the same seed, the same order.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = mergetune_sim::rng::SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}
