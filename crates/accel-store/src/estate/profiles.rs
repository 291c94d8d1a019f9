//! The device profiles the console's candidate pages ask about. Profiles are few
//! (tens), so the console reads them all and filters and pages them itself; the
//! read is `accelerator::profiles`' own list, the one the accelerator API answers
//! from.

use super::Estate;
use crate::accelerator::profiles::{self, Profile};
use crate::StoreError;

impl Estate<'_> {
    /// Every device profile, in creation order.
    pub async fn profiles(&self) -> Result<Vec<Profile>, StoreError> {
        self.0.read(|tx| Box::pin(profiles::list(tx, None))).await
    }
}
