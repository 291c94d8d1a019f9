//! Capacity arithmetic shared by claims and the candidate search.
//!
//! Placement's rule for one (provider, resource class): an amount fits when
//! `min_unit <= amount <= max_unit`, `amount % step_size == 0` and
//! `used + amount <= (total - reserved) * allocation_ratio`. Capacity is computed in
//! floating point and truncated, as upstream's SQL does.
//!
//! A claim (an allocation write) judges each of its allocations with [`Limits::judge`],
//! which adds upstream's two refinements of the rule: several allocations of one
//! write on the same inventory count together, and an inventory already over capacity
//! still accepts a write that leaves its usage no worse than before (bug 2104040).

/// The limits of one inventory record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub total: i64,
    pub reserved: i64,
    pub min_unit: i64,
    pub max_unit: i64,
    pub step_size: i64,
    pub allocation_ratio: f64,
}

impl Limits {
    /// All of `total` on offer in steps of one: nothing reserved, any amount from 1 to
    /// `total`, no overcommit (the inventory of upstream's test fixtures).
    pub fn whole(total: i64) -> Limits {
        Limits {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: 1.0,
        }
    }

    /// `int((total - reserved) * allocation_ratio)`.
    pub fn capacity(&self) -> i64 {
        ((self.total - self.reserved) as f64 * self.allocation_ratio) as i64
    }

    /// Whether a single allocation of `amount` respects min, max and step.
    pub fn unit_ok(&self, amount: i64) -> bool {
        amount >= self.min_unit
            && amount <= self.max_unit
            && self.step_size > 0
            && amount % self.step_size == 0
    }

    /// Whether `amount` more fits when `used` is already consumed.
    pub fn fits(&self, used: i64, amount: i64) -> bool {
        self.unit_ok(amount) && used.saturating_add(amount) <= self.capacity()
    }
}

/// What one allocation of a claim asks of an inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Usage held by others: what is left once the claim's consumers are cleared.
    pub used: i64,
    /// This allocation's amount (checked against min, max and step).
    pub amount: i64,
    /// Everything the claim puts on this inventory so far, this allocation included.
    pub claim_total: i64,
    /// Usage before the write, `None` when the inventory had no allocations at all.
    pub before: Option<i64>,
}

/// The verdict on one allocation of a claim, as upstream's
/// `_check_capacity_exceeded`: constraints are checked before capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fits,
    /// Outside min unit, max unit or step size.
    Constraints,
    /// Over `(total - reserved) * allocation_ratio`, and worse than before.
    Capacity,
}

impl Limits {
    /// Judges one allocation of a claim: its amount must respect the unit rules, and
    /// both it alone and the claim's total on this inventory must fit beside the usage
    /// of others, unless the claim leaves usage no higher than it was before.
    pub fn judge(&self, claim: &Claim) -> Verdict {
        if !self.unit_ok(claim.amount) {
            return Verdict::Constraints;
        }
        let capacity = self.capacity();
        let alone = claim.used.saturating_add(claim.amount);
        let together = claim.used.saturating_add(claim.claim_total);
        if alone <= capacity && together <= capacity {
            return Verdict::Fits;
        }
        match claim.before {
            Some(before) if together <= before => Verdict::Fits,
            _ => Verdict::Capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lim(total: i64, reserved: i64, ratio: f64) -> Limits {
        Limits {
            total,
            reserved,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: ratio,
        }
    }

    #[test]
    fn capacity_truncates() {
        assert_eq!(lim(24, 0, 16.0).capacity(), 384);
        assert_eq!(lim(131072, 0, 1.5).capacity(), 196608);
        assert_eq!(lim(3, 0, 1.5).capacity(), 4);
        assert_eq!(lim(2000, 100, 1.0).capacity(), 1900);
    }

    #[test]
    fn step_and_bounds() {
        let l = Limits {
            total: 2048,
            reserved: 0,
            min_unit: 10,
            max_unit: 1000,
            step_size: 10,
            allocation_ratio: 1.0,
        };
        assert!(l.fits(0, 10));
        assert!(!l.fits(0, 5));
        assert!(!l.fits(0, 15));
        assert!(!l.fits(0, 1010));
        assert!(l.fits(1040, 1000));
        assert!(!l.fits(1050, 1000));
    }

    fn claim(used: i64, amount: i64, claim_total: i64, before: Option<i64>) -> Claim {
        Claim {
            used,
            amount,
            claim_total,
            before,
        }
    }

    fn judge(total: i64, used: i64, amount: i64, before: Option<i64>) -> Verdict {
        let l = Limits {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: 1000,
            step_size: 1,
            allocation_ratio: 1.0,
        };
        l.judge(&claim(used, amount, amount, before))
    }

    #[test]
    fn judge_within_capacity() {
        assert_eq!(judge(10, 0, 10, None), Verdict::Fits);
        assert_eq!(judge(10, 5, 5, Some(5)), Verdict::Fits);
        assert_eq!(judge(10, 5, 6, Some(5)), Verdict::Capacity);
    }

    #[test]
    fn judge_checks_constraints_first() {
        let l = Limits {
            total: 100,
            reserved: 0,
            min_unit: 10,
            max_unit: 50,
            step_size: 10,
            allocation_ratio: 1.0,
        };
        assert_eq!(l.judge(&claim(0, 5, 5, None)), Verdict::Constraints);
        assert_eq!(l.judge(&claim(0, 60, 60, None)), Verdict::Constraints);
        assert_eq!(l.judge(&claim(0, 15, 15, None)), Verdict::Constraints);
        assert_eq!(l.judge(&claim(95, 20, 20, None)), Verdict::Capacity);
    }

    #[test]
    fn judge_uses_ratio_and_reserved() {
        // (3 - 0) * 1.5 = 4.5: 4 fits, 5 does not.
        let l = Limits {
            max_unit: 10,
            ..lim(3, 0, 1.5)
        };
        assert_eq!(l.judge(&claim(0, 4, 4, None)), Verdict::Fits);
        assert_eq!(l.judge(&claim(0, 5, 5, None)), Verdict::Capacity);
        let l = Limits {
            max_unit: 10,
            ..lim(10, 8, 1.0)
        };
        assert_eq!(l.judge(&claim(0, 3, 3, None)), Verdict::Capacity);
    }

    #[test]
    fn judge_adds_up_one_claims_allocations() {
        // A second allocation of 6 on the same class: 6 alone fits, 12 does not.
        let l = lim(10, 0, 1.0);
        assert_eq!(l.judge(&claim(0, 6, 12, None)), Verdict::Capacity);
        assert_eq!(l.judge(&claim(0, 6, 6, None)), Verdict::Fits);
    }

    #[test]
    fn judge_accepts_over_capacity_when_not_worse() {
        // Inventory shrank to 8 under usage 10 (held by this consumer, now cleared).
        assert_eq!(judge(8, 0, 10, Some(10)), Verdict::Fits);
        assert_eq!(judge(8, 0, 9, Some(10)), Verdict::Fits);
        assert_eq!(judge(8, 0, 11, Some(10)), Verdict::Capacity);
        // Another consumer's 10 stays: adding anything makes it worse.
        assert_eq!(judge(8, 10, 1, Some(10)), Verdict::Capacity);
        // No prior usage at all: the plain capacity rule.
        assert_eq!(judge(8, 0, 9, None), Verdict::Capacity);
    }

    proptest! {
        #[test]
        fn judge_agrees_with_fits_for_a_single_new_allocation(total in 1i64..10_000, reserved in 0i64..10_000,
                                       ratio in 0.1f64..20.0, used in 0i64..200_000, amount in 1i64..200_000) {
            let l = Limits { total, reserved, min_unit: 1, max_unit: i64::MAX, step_size: 1, allocation_ratio: ratio };
            prop_assert_eq!(l.judge(&claim(used, amount, amount, None)) == Verdict::Fits, l.fits(used, amount));
        }

        #[test]
        fn fits_never_exceeds_capacity(total in 1i64..10_000, reserved in 0i64..10_000,
                                       ratio in 0.1f64..20.0, used in 0i64..200_000, amount in 1i64..200_000) {
            let l = Limits { total, reserved, min_unit: 1, max_unit: i64::MAX, step_size: 1, allocation_ratio: ratio };
            if l.fits(used, amount) {
                prop_assert!(used + amount <= l.capacity());
            }
        }

        #[test]
        fn step_respected(step in 1i64..64, amount in 1i64..10_000) {
            let l = Limits { total: 1_000_000, reserved: 0, min_unit: 1, max_unit: 1_000_000, step_size: step, allocation_ratio: 1.0 };
            prop_assert_eq!(l.fits(0, amount), amount % step == 0);
        }
    }
}
