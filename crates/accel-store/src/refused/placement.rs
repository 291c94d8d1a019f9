//! What the placement operations refuse, as data: the Placement API's error module
//! words each variant (upstream's sentences are there, not here).

/// A refusal of a placement operation ([`crate::StoreError::Refused`], through [`super::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No provider has this uuid.
    NoProvider { uuid: String },
    /// The provider's generation is not the one the client sent.
    ProviderGeneration { uuid: String },
    /// A provider's generation moved on between this write's read and its
    /// compare-and-swap (not rerun: the client decides).
    ProviderChanged,
    /// A consumer's generation moved on between this write's read and its
    /// compare-and-swap.
    ConsumerChanged,
    /// A provider create is refused for its parent.
    ProviderCreate {
        uuid: String,
        name: String,
        why: ParentRefusal,
    },
    /// A provider update is refused for its new parent.
    ProviderUpdate { uuid: String, why: ParentRefusal },
    /// A provider create names a uuid or a name already taken (the taken ones).
    ProviderExists {
        uuid: Option<String>,
        name: Option<String>,
    },
    /// A provider rename names a name already taken.
    ProviderNameTaken { name: String },
    /// Deleting a provider that has children.
    ProviderHasChildren { uuid: String },
    /// Deleting a provider that has allocations.
    ProviderInUse { uuid: String },
    /// A provider listing filters on a class that does not exist.
    ListUnknownClass { name: String },
    /// A provider listing requires traits that do not exist (sorted, deduplicated).
    ListUnknownTraits { names: Vec<String> },
    /// No resource class has this name.
    NoClass { name: String },
    /// A resource class create names an existing class.
    ClassExists { name: String },
    /// A resource class rename names an existing class.
    ClassNameTaken { name: String },
    /// A custom class id could not be found in the retries allowed.
    ClassIdRace { name: String },
    /// Renaming a standard resource class.
    StandardClassUpdate { name: String },
    /// Deleting a standard resource class.
    StandardClassDelete { name: String },
    /// Deleting a resource class some inventory uses.
    ClassInUse { name: String },
    /// No trait has this name.
    NoTrait { name: String },
    /// Deleting a standard trait.
    StandardTrait { name: String },
    /// Deleting a trait some provider has.
    TraitInUse { name: String },
    /// Setting a provider's traits to traits that do not exist (sorted, deduplicated).
    UnknownTraits { names: Vec<String> },
    /// An inventory change drops classes allocations still use (in inventory order).
    InventoryInUse { uuid: String, classes: Vec<String> },
}

/// Why a provider's parent is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentRefusal {
    /// The parent does not exist.
    Missing,
    /// The parent is the provider itself.
    Itself,
    /// The parent is below the provider.
    Loop,
    /// Moving a child to another parent before microversion 1.37.
    Reparent,
    /// Making a child a root before microversion 1.37.
    Unparent,
}
