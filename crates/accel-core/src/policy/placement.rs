//! Placement's rule set, as upstream Placement 16.0.0 registers it
//! (`placement/policies/*.py`, in `policies.list_rules()` order).
//!
//! New defaults: almost every API is `role:admin or role:service`, the reshaper is
//! `role:service` only, and `GET /usages` also admits a reader of the project asked
//! about (Placement passes `{"project_id": <query project_id>}` as the target for it
//! and the caller's own project and user for every other rule). Each base rule except
//! `admin_api` carries the deprecated check `role:admin`, so in legacy mode
//! (`enforce_new_defaults = false`) an admin can still do everything while a service
//! user without the admin role can do almost nothing. Every rule except
//! `project_reader_api` (which is only ever reached through `rule:`) accepts
//! project-scoped tokens only.
//!
//! Handlers authorize against the name constants below rather than string literals.

use super::rules::{DeprecatedRule, Operation, RuleDefault, Scope};

pub const ADMIN_API: &str = "admin_api";
pub const SERVICE_API: &str = "service_api";
pub const ADMIN_OR_SERVICE_API: &str = "admin_or_service_api";
pub const PROJECT_READER_API: &str = "project_reader_api";
pub const ADMIN_OR_PROJECT_READER_OR_SERVICE_API: &str = "admin_or_project_reader_or_service_api";
pub const RESOURCE_PROVIDERS_LIST: &str = "placement:resource_providers:list";
pub const RESOURCE_PROVIDERS_CREATE: &str = "placement:resource_providers:create";
pub const RESOURCE_PROVIDERS_SHOW: &str = "placement:resource_providers:show";
pub const RESOURCE_PROVIDERS_UPDATE: &str = "placement:resource_providers:update";
pub const RESOURCE_PROVIDERS_DELETE: &str = "placement:resource_providers:delete";
pub const RESOURCE_CLASSES_LIST: &str = "placement:resource_classes:list";
pub const RESOURCE_CLASSES_CREATE: &str = "placement:resource_classes:create";
pub const RESOURCE_CLASSES_SHOW: &str = "placement:resource_classes:show";
pub const RESOURCE_CLASSES_UPDATE: &str = "placement:resource_classes:update";
pub const RESOURCE_CLASSES_DELETE: &str = "placement:resource_classes:delete";
pub const RESOURCE_PROVIDERS_INVENTORIES_LIST: &str =
    "placement:resource_providers:inventories:list";
pub const RESOURCE_PROVIDERS_INVENTORIES_CREATE: &str =
    "placement:resource_providers:inventories:create";
pub const RESOURCE_PROVIDERS_INVENTORIES_SHOW: &str =
    "placement:resource_providers:inventories:show";
pub const RESOURCE_PROVIDERS_INVENTORIES_UPDATE: &str =
    "placement:resource_providers:inventories:update";
pub const RESOURCE_PROVIDERS_INVENTORIES_DELETE: &str =
    "placement:resource_providers:inventories:delete";
pub const RESOURCE_PROVIDERS_AGGREGATES_LIST: &str = "placement:resource_providers:aggregates:list";
pub const RESOURCE_PROVIDERS_AGGREGATES_UPDATE: &str =
    "placement:resource_providers:aggregates:update";
pub const RESOURCE_PROVIDERS_USAGES: &str = "placement:resource_providers:usages";
pub const USAGES: &str = "placement:usages";
pub const TRAITS_LIST: &str = "placement:traits:list";
pub const TRAITS_SHOW: &str = "placement:traits:show";
pub const TRAITS_UPDATE: &str = "placement:traits:update";
pub const TRAITS_DELETE: &str = "placement:traits:delete";
pub const RESOURCE_PROVIDERS_TRAITS_LIST: &str = "placement:resource_providers:traits:list";
pub const RESOURCE_PROVIDERS_TRAITS_UPDATE: &str = "placement:resource_providers:traits:update";
pub const RESOURCE_PROVIDERS_TRAITS_DELETE: &str = "placement:resource_providers:traits:delete";
pub const ALLOCATIONS_MANAGE: &str = "placement:allocations:manage";
pub const ALLOCATIONS_LIST: &str = "placement:allocations:list";
pub const ALLOCATIONS_UPDATE: &str = "placement:allocations:update";
pub const ALLOCATIONS_DELETE: &str = "placement:allocations:delete";
pub const RESOURCE_PROVIDERS_ALLOCATIONS_LIST: &str =
    "placement:resource_providers:allocations:list";
pub const ALLOCATION_CANDIDATES_LIST: &str = "placement:allocation_candidates:list";
pub const RESHAPER_RESHAPE: &str = "placement:reshaper:reshape";

/// Upstream names the deprecated rule `rule:admin_api` (sic): no policy file entry uses
/// that name, so only its check string matters.
const DEPRECATED_ADMIN: DeprecatedRule = DeprecatedRule {
    name: "rule:admin_api",
    check: "role:admin",
};

const fn op(method: &'static str, path: &'static str) -> Operation {
    Operation { method, path }
}

/// Every rule Placement registers, with its default, deprecated check and scope.
pub const RULES: &[RuleDefault] = &[
    RuleDefault {
        name: ADMIN_API,
        check: "role:admin",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Default rule for most placement APIs.",
        operations: &[],
    },
    RuleDefault {
        name: SERVICE_API,
        check: "role:service",
        scope_types: &[Scope::Project],
        deprecated: Some(DEPRECATED_ADMIN),
        description: "Default rule for service-to-service placement APIs.",
        operations: &[],
    },
    RuleDefault {
        name: ADMIN_OR_SERVICE_API,
        check: "role:admin or role:service",
        scope_types: &[Scope::Project],
        deprecated: Some(DEPRECATED_ADMIN),
        description: "Default rule for most placement APIs.",
        operations: &[],
    },
    RuleDefault {
        name: PROJECT_READER_API,
        check: "role:reader and project_id:%(project_id)s",
        scope_types: &[],
        deprecated: Some(DEPRECATED_ADMIN),
        description: "Default rule for Project level reader APIs.",
        operations: &[],
    },
    RuleDefault {
        name: ADMIN_OR_PROJECT_READER_OR_SERVICE_API,
        check: "role:admin or rule:project_reader_api or role:service",
        scope_types: &[Scope::Project],
        deprecated: Some(DEPRECATED_ADMIN),
        description: "Default rule for project level reader APIs.",
        operations: &[],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource providers.",
        operations: &[op("GET", "/resource_providers")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_CREATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Create resource provider.",
        operations: &[op("POST", "/resource_providers")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_SHOW,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Show resource provider.",
        operations: &[op("GET", "/resource_providers/{uuid}")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update resource provider.",
        operations: &[op("PUT", "/resource_providers/{uuid}")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete resource provider.",
        operations: &[op("DELETE", "/resource_providers/{uuid}")],
    },
    RuleDefault {
        name: RESOURCE_CLASSES_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource classes.",
        operations: &[op("GET", "/resource_classes")],
    },
    RuleDefault {
        name: RESOURCE_CLASSES_CREATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Create resource class.",
        operations: &[op("POST", "/resource_classes")],
    },
    RuleDefault {
        name: RESOURCE_CLASSES_SHOW,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Show resource class.",
        operations: &[op("GET", "/resource_classes/{name}")],
    },
    RuleDefault {
        name: RESOURCE_CLASSES_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update resource class.",
        operations: &[op("PUT", "/resource_classes/{name}")],
    },
    RuleDefault {
        name: RESOURCE_CLASSES_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete resource class.",
        operations: &[op("DELETE", "/resource_classes/{name}")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_INVENTORIES_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource provider inventories.",
        operations: &[op("GET", "/resource_providers/{uuid}/inventories")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_INVENTORIES_CREATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Create one resource provider inventory.",
        operations: &[op("POST", "/resource_providers/{uuid}/inventories")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_INVENTORIES_SHOW,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Show resource provider inventory.",
        operations: &[op(
            "GET",
            "/resource_providers/{uuid}/inventories/{resource_class}",
        )],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_INVENTORIES_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update resource provider inventory.",
        operations: &[
            op("PUT", "/resource_providers/{uuid}/inventories"),
            op(
                "PUT",
                "/resource_providers/{uuid}/inventories/{resource_class}",
            ),
        ],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_INVENTORIES_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete resource provider inventory.",
        operations: &[
            op("DELETE", "/resource_providers/{uuid}/inventories"),
            op(
                "DELETE",
                "/resource_providers/{uuid}/inventories/{resource_class}",
            ),
        ],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_AGGREGATES_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource provider aggregates.",
        operations: &[op("GET", "/resource_providers/{uuid}/aggregates")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_AGGREGATES_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update resource provider aggregates.",
        operations: &[op("PUT", "/resource_providers/{uuid}/aggregates")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_USAGES,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource provider usages.",
        operations: &[op("GET", "/resource_providers/{uuid}/usages")],
    },
    RuleDefault {
        name: USAGES,
        check: "rule:admin_or_project_reader_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List total resource usages for a given project.",
        operations: &[op("GET", "/usages")],
    },
    RuleDefault {
        name: TRAITS_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List traits.",
        operations: &[op("GET", "/traits")],
    },
    RuleDefault {
        name: TRAITS_SHOW,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Show trait.",
        operations: &[op("GET", "/traits/{name}")],
    },
    RuleDefault {
        name: TRAITS_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update trait.",
        operations: &[op("PUT", "/traits/{name}")],
    },
    RuleDefault {
        name: TRAITS_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete trait.",
        operations: &[op("DELETE", "/traits/{name}")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_TRAITS_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource provider traits.",
        operations: &[op("GET", "/resource_providers/{uuid}/traits")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_TRAITS_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update resource provider traits.",
        operations: &[op("PUT", "/resource_providers/{uuid}/traits")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_TRAITS_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete resource provider traits.",
        operations: &[op("DELETE", "/resource_providers/{uuid}/traits")],
    },
    RuleDefault {
        name: ALLOCATIONS_MANAGE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Manage allocations.",
        operations: &[op("POST", "/allocations")],
    },
    RuleDefault {
        name: ALLOCATIONS_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List allocations.",
        operations: &[op("GET", "/allocations/{consumer_uuid}")],
    },
    RuleDefault {
        name: ALLOCATIONS_UPDATE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Update allocations.",
        operations: &[op("PUT", "/allocations/{consumer_uuid}")],
    },
    RuleDefault {
        name: ALLOCATIONS_DELETE,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Delete allocations.",
        operations: &[op("DELETE", "/allocations/{consumer_uuid}")],
    },
    RuleDefault {
        name: RESOURCE_PROVIDERS_ALLOCATIONS_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List resource provider allocations.",
        operations: &[op("GET", "/resource_providers/{uuid}/allocations")],
    },
    RuleDefault {
        name: ALLOCATION_CANDIDATES_LIST,
        check: "rule:admin_or_service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "List allocation candidates.",
        operations: &[op("GET", "/allocation_candidates")],
    },
    RuleDefault {
        name: RESHAPER_RESHAPE,
        check: "rule:service_api",
        scope_types: &[Scope::Project],
        deprecated: None,
        description: "Reshape Inventory and Allocations.",
        operations: &[op("POST", "/reshaper")],
    },
];
