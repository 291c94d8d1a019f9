//! The answer of `accel explain -f json` (and of the console's explainer), a public
//! interface of its own: which root providers yield allocation candidates for a
//! request and, for those that do not, why.
//!
//! ```json
//! {"candidates": 0, "roots": [{"uuid": "...", "name": "compute1", "fits": false,
//!   "reasons": [{"code": "capacity", "group": "1", "provider": "...",
//!                "provider_name": "compute1_fpga0",
//!                "resource_class": "CUSTOM_ACCELERATOR_FPGA", "trait": null,
//!                "detail": "needs 2 CUSTOM_ACCELERATOR_FPGA, 1 free: ..."}]}]}
//! ```
//!
//! Every field is always written: a field that does not apply is `null`, and `group`
//! is `""` for the unsuffixed request group (`null` for request-wide rules such as
//! `root_required`). `provider` is a uuid, `provider_name` its name. Roots are in
//! name order (then uuid), so two runs over the same estate print the same document
//! and a person finds a host by eye; Placement's own order of candidates is "undefined
//! but deterministic" and not worth copying here.
//!
//! The engine's [`Explanation`] holds interned ids; [`Explained::from_core`] is the one
//! place that turns it into names and uuids, for the CLI and the console alike.

use accel_core::candidates::explain::{Explanation, Names};
use accel_core::candidates::Snapshot;
use serde::{Deserialize, Serialize};

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explained {
    /// How many allocation candidates Placement answered (without `limit`).
    pub candidates: usize,
    pub roots: Vec<ExplainedRoot>,
}

/// The verdict on one root provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedRoot {
    pub uuid: String,
    pub name: String,
    /// Whether Placement's unlimited answer has a candidate in this root's tree.
    pub fits: bool,
    /// Empty when `fits`.
    pub reasons: Vec<ExplainedReason>,
}

/// One reason a root does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedReason {
    /// One of `no_inventory`, `capacity`, `max_unit`, `min_unit`, `step_size`,
    /// `required_trait`, `forbidden_trait`, `any_trait`, `member_of`, `in_tree`,
    /// `root_required`, `root_forbidden`, `same_subtree`, `isolate`, `single_tree`;
    /// `unknown_trait` from `accel explain` when Placement knows no such trait.
    pub code: String,
    /// The request group's suffix, `""` for the unsuffixed group.
    pub group: Option<String>,
    /// The provider's uuid.
    pub provider: Option<String>,
    /// Its name, so a table can say which provider a reason is about.
    #[serde(default)]
    pub provider_name: Option<String>,
    pub resource_class: Option<String>,
    #[serde(rename = "trait")]
    pub trait_name: Option<String>,
    /// A sentence with the numbers.
    pub detail: String,
}

impl Explained {
    /// The wire form of `explanation` over `snapshot`, with `candidates` as Placement
    /// counted them; names come from `names`.
    pub fn from_core(
        candidates: usize,
        explanation: &Explanation,
        snapshot: &Snapshot,
        names: &dyn Names,
    ) -> Explained {
        let uuid = |id| snapshot.provider(id).uuid.to_string();
        let mut roots: Vec<ExplainedRoot> = explanation
            .roots
            .iter()
            .map(|r| ExplainedRoot {
                uuid: uuid(r.root),
                name: names.provider(r.root),
                fits: r.fits,
                reasons: r
                    .reasons
                    .iter()
                    .map(|reason| ExplainedReason {
                        code: reason.code.as_str().to_owned(),
                        group: reason.group.clone(),
                        provider: reason.provider.map(uuid),
                        provider_name: reason.provider.map(|id| names.provider(id)),
                        resource_class: reason.resource_class.map(|rc| names.resource_class(rc)),
                        trait_name: reason.trait_id.map(|t| names.trait_name(t)),
                        detail: reason.detail.clone(),
                    })
                    .collect(),
            })
            .collect();
        roots.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.uuid.cmp(&b.uuid)));
        Explained { candidates, roots }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_is_written_and_trait_keeps_its_name() {
        let e = Explained {
            candidates: 0,
            roots: vec![ExplainedRoot {
                uuid: "u".into(),
                name: "n".into(),
                fits: false,
                reasons: vec![ExplainedReason {
                    code: "root_required".into(),
                    group: None,
                    provider: Some("u".into()),
                    provider_name: Some("n".into()),
                    resource_class: None,
                    trait_name: Some("CUSTOM_X".into()),
                    detail: "d".into(),
                }],
            }],
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"candidates": 0, "roots": [{"uuid": "u", "name": "n", "fits": false,
                "reasons": [{"code": "root_required", "group": null, "provider": "u",
                    "provider_name": "n", "resource_class": null, "trait": "CUSTOM_X", "detail": "d"}]}]})
        );
        assert_eq!(serde_json::from_value::<Explained>(v).unwrap(), e);
    }
}
