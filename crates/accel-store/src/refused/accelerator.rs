//! What the accelerator operations refuse, as data: the accelerator API's error module
//! words each variant (upstream's sentences are there, not here).

use accel_core::accelerator::ArqState;

/// A refusal of a accelerator operation ([`crate::StoreError::Refused`], through [`super::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No record of `kind` with `key` (that the caller may see): upstream's
    /// `ResourceNotFound`, a 404.
    NotFound(Kind, Key),
    /// An ARQ whose state does not allow the change (upstream's `ARQBadState`).
    ArqBadState {
        uuid: String,
        state: ArqState,
        expected: Vec<ArqState>,
    },
    /// Deleting a bound ARQ without Nova's service token.
    ArqBound { uuid: String, instance: String },
    /// A bind patch for an instance that already has ARQs (upstream has no hot-add).
    InstanceHasArqs { instance: String },
    /// An ARQ create naming a group the device profile lacks.
    NoSuchGroup { profile: String, group: usize },
    /// A profile with this name already exists.
    ProfileNameTaken { name: String },
    /// A profile with this uuid already exists.
    ProfileUuidTaken { uuid: String },
    /// Deleting a profile that ARQs still use.
    ProfileInUse { name: String, arqs: i64 },
    /// An agent's answer to a programming request its host does not have pending.
    NoPendingProgram { host: String, id: i64 },
    /// An agent's answer to a cleaning take that is no longer running.
    NoRunningCleaning {
        host: String,
        rp_uuid: String,
        attempt: i64,
    },
    /// No device provider (nor, with `or_device`, device) has `uuid`.
    NoDeviceProvider { uuid: String, or_device: bool },
    /// Cleaning a device provider a consumer still holds.
    ProviderInUse { rp_uuid: String },
    /// Releasing (offering again) a device provider a consumer still holds: it is
    /// not withheld, and releasing it would skip the cleaning its release queues.
    ReleasingInUse { rp_uuid: String },
    /// Cleaning a device provider no `[[cleaning]]` rule of its agent matches:
    /// nothing would clean it, and it would stay out of service.
    NoCleaningRule { rp_uuid: String },
    /// A hardware report naming a deployable twice.
    DeployableTwice { name: String },
    /// A hardware report whose deployable's parent is not a top-level deployable of
    /// the same device.
    BadParent { deployable: String, parent: String },
    /// A hardware report naming a control path twice.
    ControlPathTwice { cpid_info: String },
    /// A deployable whose `trait*` attribute names a standard trait this binary lacks.
    UnknownTrait { name: String, deployable: String },
    /// A host's deployables whose parents form a cycle.
    ParentCycle,
    /// A deployable's `inventory:<RC>` attribute that is not a positive integer.
    BadInventory {
        deployable: String,
        key: String,
        value: String,
    },
    /// No compute node provider has the reporting host's name; `own_possible` when
    /// the agent could own its node provider instead (a hardware report).
    NoComputeNode { host: String, own_possible: bool },
    /// A node provider of that name exists and is not accel's (`owner_trait` absent).
    NodeNotOwned {
        name: String,
        uuid: String,
        owner_trait: &'static str,
    },
    /// Removing an attach handle an ARQ holds.
    HandleHeld { uuid: String },
    /// Removing a deployable ARQs hold.
    DeployableHeld { name: String },
    /// A Kubernetes usage claiming one slot twice.
    SlotClaimedTwice,
    /// A Kubernetes usage claiming a slot it shows free.
    FreeSlotClaimed { slot: String },
    /// Placement refused the pods' allocations of a Kubernetes usage (`placement`:
    /// its refusal, as data).
    PodsRefused { host: String, placement: String },
    /// Unpreparing a consumer that is not a Kubernetes claim.
    NotAClaim {
        uid: String,
        consumer_type: Option<String>,
    },
}

/// The kinds of record a [`Refused::NotFound`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Arq,
    DeviceProfile,
    Device,
    Deployable,
    Attribute,
}

/// What a [`Refused::NotFound`] looked the record up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Uuid(String),
    Name(String),
    Id(i64),
    /// A deployable's resource provider.
    ProviderUuid(String),
}
