//! ARQ states and their transitions, as Cyborg's `ARQ_STATES_TRANSFORM_MATRIX`.
//!
//! `UnbindFailed` is left out on purpose: upstream defines it but its database enum
//! cannot store it, so no client ever sees it.

use std::fmt;

/// The life cycle of one accelerator request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArqState {
    Initial,
    BindStarted,
    Bound,
    Unbound,
    BindFailed,
    Deleting,
}

impl ArqState {
    pub const ALL: [ArqState; 6] = [
        ArqState::Initial,
        ArqState::BindStarted,
        ArqState::Bound,
        ArqState::Unbound,
        ArqState::BindFailed,
        ArqState::Deleting,
    ];

    /// The spelling on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            ArqState::Initial => "Initial",
            ArqState::BindStarted => "BindStarted",
            ArqState::Bound => "Bound",
            ArqState::Unbound => "Unbound",
            ArqState::BindFailed => "BindFailed",
            ArqState::Deleting => "Deleting",
        }
    }

    pub fn parse(s: &str) -> Option<ArqState> {
        ArqState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// "Resolved" states end a bind: Nova's `bind_state=resolved` and the event status
    /// (`Bound` → completed, `BindFailed`/`Deleting` → failed).
    pub fn is_resolved(self) -> bool {
        matches!(
            self,
            ArqState::Bound | ArqState::BindFailed | ArqState::Deleting
        )
    }

    /// The states an ARQ may be in for a move to `self` (upstream's transform matrix;
    /// `Initial` is only ever the state of a new ARQ).
    pub fn allowed_sources(self) -> &'static [ArqState] {
        use ArqState::*;
        match self {
            Initial => &[],
            BindStarted => &[Initial, Unbound],
            Bound => &[BindStarted],
            Unbound => &[Initial, BindStarted, Bound, BindFailed],
            BindFailed => &[BindStarted, Bound],
            Deleting => &[Initial, BindStarted, Bound, Unbound, BindFailed],
        }
    }

    pub fn can_become(self, target: ArqState) -> bool {
        target.allowed_sources().contains(&self)
    }
}

impl fmt::Display for ArqState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ArqState::{self, *};

    #[test]
    fn spelling_round_trips() {
        for s in ArqState::ALL {
            assert_eq!(ArqState::parse(s.as_str()), Some(s));
        }
        assert_eq!(ArqState::parse("UnbindFailed"), None);
    }

    #[test]
    fn bind_paths() {
        assert!(Initial.can_become(BindStarted));
        assert!(Unbound.can_become(BindStarted));
        assert!(!Bound.can_become(BindStarted));
        assert!(BindStarted.can_become(Bound));
        assert!(!Initial.can_become(Bound));
        assert!(Bound.can_become(Unbound));
        assert!(!Unbound.can_become(Initial));
        assert!(Bound.is_resolved() && BindFailed.is_resolved() && Deleting.is_resolved());
        assert!(!Initial.is_resolved() && !BindStarted.is_resolved() && !Unbound.is_resolved());
    }
}
