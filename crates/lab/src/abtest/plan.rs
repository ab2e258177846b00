//! The block schedule: `pairs` pairs of one block at each level, the order within each pair
//! shuffled from a seed and balanced (half the pairs start with each level, so neither
//! level always follows a level write of the other kind, nor always comes first).

use crate::calibrate::stats;
use mergetune_logic::decision::Level;

/// One pair of blocks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairPlan {
    pub first: Level,
    pub second: Level,
}

impl PairPlan {
    pub fn order(self) -> [Level; 2] {
        [self.first, self.second]
    }
}

/// `pairs` pairs of `base` and `test`: `pairs / 2` start with `base`, the rest with `test`
/// (the odd one out falls to `test` first), in an order fixed by `seed`.
pub fn schedule(pairs: usize, base: Level, test: Level, seed: u64) -> Vec<PairPlan> {
    let mut out: Vec<PairPlan> = (0..pairs)
        .map(|i| {
            if i < pairs / 2 {
                PairPlan {
                    first: base,
                    second: test,
                }
            } else {
                PairPlan {
                    first: test,
                    second: base,
                }
            }
        })
        .collect();
    stats::shuffle(&mut out, seed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_runs_both_levels_once_and_the_orders_are_balanced() {
        let plan = schedule(201, Level::L0, Level::L3, 7);
        assert_eq!(plan.len(), 201);
        assert!(plan.iter().all(|p| {
            let mut o = p.order();
            o.sort();
            o == [Level::L0, Level::L3]
        }));
        let base_first = plan.iter().filter(|p| p.first == Level::L0).count();
        assert_eq!(base_first, 100);
    }

    #[test]
    fn the_order_is_shuffled_and_fixed_by_the_seed() {
        let a = schedule(200, Level::L0, Level::L3, 1);
        assert_eq!(a, schedule(200, Level::L0, Level::L3, 1));
        assert_ne!(a, schedule(200, Level::L0, Level::L3, 2));
        // Not the unshuffled list (half of one order, then the other): the first 100 hold
        // both orders.
        let head = a[..100].iter().filter(|p| p.first == Level::L0).count();
        assert!((20..=80).contains(&head), "{head}");
        // And not alternating either: some runs of the same order.
        assert!(a.windows(2).any(|w| w[0] == w[1]));
    }
}
