//! A node provider accel owns (issue 30, `node_provider = "own"`): on a cluster
//! without Nova nobody registers the compute node provider the agent reports under,
//! so the agent asks the server to create it. It is named after the node, its uuid is
//! derived from the name as the devices' are (`uuid3(DNS, name)`), and it carries
//! [`OWNER_TRAIT`], never `COMPUTE_*` or `OWNER_NOVA`: that trait is how a later call
//! (or an operator switching the node to Nova) tells accel's node from Nova's.
//!
//! A provider of that name that accel does not own (Nova's, or one made by hand) is
//! refused rather than adopted: reporting under it would silently mix an owned and a
//! Nova-managed tree, and the operator has to choose (`node_provider = "nova"`).

use super::{compute_node, provider_uuid};
use crate::accelerator::Refused;
use crate::placement::{providers, traits};
use crate::{StoreError, Tx};

/// The trait on every node provider accel created and owns.
pub const OWNER_TRAIT: &str = "CUSTOM_OWNER_ACCEL";

/// The node provider accel owns for `name`, created (with [`OWNER_TRAIT`]) when no
/// provider has that name; answers it and whether this call created it. A provider
/// of that name without the trait is [`Refused::NodeNotOwned`].
pub async fn ensure_owned(
    tx: &mut Tx,
    name: &str,
) -> Result<(providers::Provider, bool), StoreError> {
    if let Some(rp) = compute_node(tx, name).await? {
        let owned = traits::for_provider(tx, rp.id)
            .await?
            .iter()
            .any(|t| t.name == OWNER_TRAIT);
        if owned {
            return Ok((rp, false));
        }
        return Err(Refused::NodeNotOwned {
            name: name.to_owned(),
            uuid: rp.uuid,
            owner_trait: OWNER_TRAIT,
        }
        .into());
    }
    let rp = providers::create(tx, &provider_uuid(name), name, None).await?;
    let (t, _) = traits::ensure(tx, OWNER_TRAIT).await?;
    let generation = traits::set_for_provider(tx, &rp, &[t.id]).await?;
    Ok((providers::Provider { generation, ..rp }, true))
}
