//! The calibration's statistics: medians, distribution-free intervals, paired changes and
//! the seeded interleaving order. Pure, so deterministic.

use mergetune_lab::calibrate::stats::{
    estimate, median, median_ci, paired_change_percent, shuffle,
};

#[test]
fn median_of_odd_and_even_counts() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median(&[7.0]), 7.0);
    assert!(median(&[]).is_nan());
}

#[test]
fn the_interval_of_ten_is_the_second_and_ninth_values() {
    // Order statistics: [x(2), x(9)] covers the median with 1 - 2 * 11/1024 = 97.85%;
    // [x(3), x(8)] would cover only 89.06%, short of 95%.
    let xs: Vec<f64> = (1..=10).rev().map(f64::from).collect();
    let (lo, hi, cov) = median_ci(&xs, 0.95);
    assert_eq!((lo, hi), (2.0, 9.0));
    assert!((cov - (1.0 - 2.0 * 11.0 / 1024.0)).abs() < 1e-12, "{cov}");
}

#[test]
fn more_values_give_a_narrower_interval_at_the_same_level() {
    let xs: Vec<f64> = (1..=20).map(f64::from).collect();
    let (lo, hi, cov) = median_ci(&xs, 0.95);
    // n = 20: ranks 6 and 15 (coverage 95.86%).
    assert_eq!((lo, hi), (6.0, 15.0));
    assert!((0.95..0.97).contains(&cov), "{cov}");
}

#[test]
fn too_few_values_give_the_range_and_say_its_lower_coverage() {
    let (lo, hi, cov) = median_ci(&[5.0, 1.0, 3.0, 2.0, 4.0], 0.95);
    assert_eq!((lo, hi), (1.0, 5.0));
    assert!((cov - 0.9375).abs() < 1e-12, "{cov}");
    let (lo, hi, cov) = median_ci(&[2.0, 1.0], 0.95);
    assert_eq!((lo, hi, cov), (1.0, 2.0, 0.5));
}

#[test]
fn paired_changes_are_per_repetition_percentages() {
    let a = [100.0, 200.0, 50.0];
    let b = [90.0, 220.0, 50.0];
    let d = paired_change_percent(&a, &b);
    assert_eq!(d.len(), 3);
    assert!((d[0] + 10.0).abs() < 1e-9 && (d[1] - 10.0).abs() < 1e-9 && d[2] == 0.0);
}

#[test]
fn an_estimate_contains_its_median() {
    let xs = [9.0, 10.0, 11.0, 10.5, 9.5, 10.2, 9.8, 10.1, 9.9, 30.0];
    let e = estimate(&xs);
    assert!(e.low <= e.median && e.median <= e.high);
    // One outlier does not move the interval past the second-highest value.
    assert!(e.high <= 11.0, "{e:?}");
}

#[test]
fn the_interleaving_order_is_a_permutation_fixed_by_the_seed() {
    let mut a: Vec<u32> = (0..16).collect();
    let mut b = a.clone();
    let mut c = a.clone();
    shuffle(&mut a, 7);
    shuffle(&mut b, 7);
    shuffle(&mut c, 8);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..16).collect::<Vec<_>>());
    assert_ne!(
        a, sorted,
        "a shuffle of 16 that leaves them in order is astronomically unlikely"
    );
}
