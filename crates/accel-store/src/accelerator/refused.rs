//! What the accelerator operations refuse, as data: the accelerator API's error module
//! words each variant (upstream's sentences are there, not here).

/// A refusal of a accelerator operation ([`crate::StoreError::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {}

impl From<Refused> for crate::StoreError {
    fn from(r: Refused) -> Self {
        crate::StoreError::Refused(crate::error::Refused::Accelerator(r))
    }
}
