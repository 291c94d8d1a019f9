//! Capacity arithmetic shared by claims and the candidate search.
//!
//! Placement's rule for one (provider, resource class): an amount fits when
//! `min_unit <= amount <= max_unit`, `amount % step_size == 0` and
//! `used + amount <= (total - reserved) * allocation_ratio`. Capacity is computed in
//! floating point and truncated, as upstream's SQL does.

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

    proptest! {
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
