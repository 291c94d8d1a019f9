//! Cyborg's rule set, as upstream master registers it (`cyborg/policies/*.py`) after
//! the spring 2026 security fixes: the "secure defaults" of reference §6.
//!
//! New defaults: device-profile reads for any reader of the caller's project (or an
//! admin), profile writes admin-only, ARQs for members of the project (or the service
//! user), and hardware reads (devices, deployables, attributes) for a project manager
//! or an admin — never for a plain member (CVE-2026-40213). Each rule that changed in
//! Wallaby keeps its deprecated check, OR-ed in while `enforce_new_defaults` is false,
//! as upstream: `rule:admin_or_owner` for profile and ARQ rules (always true for a
//! project-scoped caller, since the target is the caller's own project), and
//! `rule:admin_api` for hardware reads. One deliberate difference: the base rule
//! `project_manager_or_admin` has no deprecated check here (see its entry), so legacy
//! mode does not reopen hardware reads. Every API rule accepts project-scoped tokens
//! only, so a system-scoped token is refused (403).
//!
//! Project isolation of ARQs (CVE-2026-40214) is not a policy matter upstream either:
//! the store filters by the caller's project unless the caller is an admin.
//!
//! `accel:agent:report` is ours: the HTTP endpoint through which an agent (or the
//! built-in fake source) replaces a host's hardware records. Upstream agents use RPC
//! to the conductor instead, so there is no upstream rule to match.

use super::rules::{DeprecatedRule, Operation, RuleDefault, Scope};

pub const ADMIN_API: &str = "admin_api";
pub const SERVICE_API: &str = "service_api";
pub const DEVICE_PROFILE_GET_ALL: &str = "cyborg:device_profile:get_all";
pub const DEVICE_PROFILE_GET_ONE: &str = "cyborg:device_profile:get_one";
pub const DEVICE_PROFILE_CREATE: &str = "cyborg:device_profile:create";
pub const DEVICE_PROFILE_DELETE: &str = "cyborg:device_profile:delete";
pub const ARQ_GET_ALL: &str = "cyborg:arq:get_all";
pub const ARQ_GET_ONE: &str = "cyborg:arq:get_one";
pub const ARQ_CREATE: &str = "cyborg:arq:create";
pub const ARQ_DELETE: &str = "cyborg:arq:delete";
pub const ARQ_UPDATE: &str = "cyborg:arq:update";
pub const DEVICE_GET_ALL: &str = "cyborg:device:get_all";
pub const DEVICE_GET_ONE: &str = "cyborg:device:get_one";
pub const DEVICE_DISABLE: &str = "cyborg:device:disable";
pub const DEVICE_ENABLE: &str = "cyborg:device:enable";
pub const DEPLOYABLE_GET_ALL: &str = "cyborg:deployable:get_all";
pub const DEPLOYABLE_GET_ONE: &str = "cyborg:deployable:get_one";
pub const DEPLOYABLE_PROGRAM: &str = "cyborg:deployable:program";
pub const ATTRIBUTE_GET_ALL: &str = "cyborg:attribute:get_all";
pub const ATTRIBUTE_GET_ONE: &str = "cyborg:attribute:get_one";
pub const ATTRIBUTE_CREATE: &str = "cyborg:attribute:create";
pub const ATTRIBUTE_DELETE: &str = "cyborg:attribute:delete";
pub const AGENT_REPORT: &str = "accel:agent:report";

const ADMIN_OR_OWNER: &str = "is_admin:True or project_id:%(project_id)s";

/// The deprecated check of the Wallaby base rules (upstream names it
/// `rule:admin_or_owner`, so no policy file entry can address it by name).
const DEPRECATED_ADMIN_OR_OWNER: DeprecatedRule = DeprecatedRule {
    name: "rule:admin_or_owner",
    check: ADMIN_OR_OWNER,
};

const fn dep(name: &'static str, check: &'static str) -> Option<DeprecatedRule> {
    Some(DeprecatedRule { name, check })
}

const fn op(method: &'static str, path: &'static str) -> Operation {
    Operation { method, path }
}

const fn base(name: &'static str, check: &'static str, description: &'static str) -> RuleDefault {
    RuleDefault {
        name,
        check,
        scope_types: &[],
        deprecated: None,
        description,
        operations: &[],
    }
}

const fn base_dep(
    name: &'static str,
    check: &'static str,
    description: &'static str,
) -> RuleDefault {
    RuleDefault {
        name,
        check,
        scope_types: &[],
        deprecated: Some(DEPRECATED_ADMIN_OR_OWNER),
        description,
        operations: &[],
    }
}

const fn api(
    name: &'static str,
    check: &'static str,
    deprecated: Option<DeprecatedRule>,
    description: &'static str,
    operations: &'static [Operation],
) -> RuleDefault {
    RuleDefault {
        name,
        check,
        scope_types: &[Scope::Project],
        deprecated,
        description,
        operations,
    }
}

/// Every rule Cyborg registers (base rules, legacy rules, then the API rules), plus
/// accel's agent-report rule.
pub const RULES: &[RuleDefault] = &[
    base(
        ADMIN_API,
        "role:admin",
        "Legacy rule for cloud admin access",
    ),
    base(
        "project_admin_api",
        "role:admin and project_id:%(project_id)s",
        "Default rule for Project level admin APIs.",
    ),
    base(
        "project_member_api",
        "role:member and project_id:%(project_id)s",
        "Default rule for Project level non admin APIs.",
    ),
    base(
        "project_reader_api",
        "role:reader and project_id:%(project_id)s",
        "Default rule for Project level read only APIs.",
    ),
    base_dep(
        "project_member_or_admin",
        "rule:project_member_api or rule:admin_api",
        "Default rule for Project Member or admin APIs.",
    ),
    base_dep(
        "project_reader_or_admin",
        "rule:project_reader_api or rule:admin_api",
        "Default rule for Project reader or admin APIs.",
    ),
    base(
        SERVICE_API,
        "role:service",
        "Default rule for service-to-service APIs.",
    ),
    base(
        "project_manager_api",
        "role:manager and project_id:%(project_id)s",
        "Default rule for project manager APIs.",
    ),
    // Upstream also ORs `rule:admin_or_owner` into this base rule in legacy mode, which
    // is true for any project-scoped caller and so would reopen the hardware APIs to
    // every member (CVE-2026-40213). Hardware reads stay manager-or-admin in both modes
    // here; the hardware rules' own deprecated check (`rule:admin_api`) is kept.
    base(
        "project_manager_or_admin",
        "rule:project_manager_api or rule:admin_api",
        "Default rule for project manager or admin APIs.",
    ),
    base_dep(
        "project_member_or_service",
        "rule:project_member_api or rule:service_api",
        "Default rule for project member or service APIs.",
    ),
    base(
        "public_api",
        "is_public_api:True",
        "legacy rule of Internal flag for public API routes",
    ),
    base("allow", "@", "legacy rule: any access will be passed"),
    base("deny", "!", "legacy rule: all access will be forbidden"),
    base(
        "default",
        "rule:admin_or_owner",
        "Legacy rule for default rule",
    ),
    base("is_admin", "rule:admin_api", "Full read/write API access"),
    base(
        "admin_or_owner",
        ADMIN_OR_OWNER,
        "Admin or owner API access",
    ),
    base(
        "admin_or_user",
        "is_admin:True or user_id:%(user_id)s",
        "Admin or user API access",
    ),
    api(
        DEVICE_PROFILE_GET_ALL,
        "rule:project_reader_or_admin",
        dep(DEVICE_PROFILE_GET_ALL, "rule:admin_or_owner"),
        "Retrieve all device_profiles",
        &[op("GET", "/v2/device_profiles")],
    ),
    api(
        DEVICE_PROFILE_GET_ONE,
        "rule:project_reader_or_admin",
        dep(DEVICE_PROFILE_GET_ONE, "rule:admin_or_owner"),
        "Retrieve a specific device_profile",
        &[op("GET", "/v2/device_profiles/{device_profiles_uuid}")],
    ),
    api(
        DEVICE_PROFILE_CREATE,
        "rule:admin_api",
        dep(DEVICE_PROFILE_CREATE, "rule:is_admin"),
        "Create a device_profile",
        &[op("POST", "/v2/device_profiles")],
    ),
    api(
        DEVICE_PROFILE_DELETE,
        "rule:admin_api",
        dep(DEVICE_PROFILE_DELETE, "rule:is_admin"),
        "Delete device_profile(s)",
        &[
            op("DELETE", "/v2/device_profiles/{device_profiles_uuid}"),
            op(
                "DELETE",
                "/v2/device_profiles?value={device_profile_name1},{device_profile_name2}",
            ),
        ],
    ),
    api(
        ARQ_GET_ALL,
        "rule:project_reader_or_admin",
        dep(ARQ_GET_ALL, "rule:admin_or_owner"),
        "Retrieve accelerator request records.",
        &[op("GET", "/v2/accelerator_requests")],
    ),
    api(
        ARQ_GET_ONE,
        "rule:project_reader_or_admin",
        dep(ARQ_GET_ONE, "rule:admin_or_owner"),
        "Get an accelerator request record.",
        &[op("GET", "/v2/accelerator_requests/{arqs_uuid}")],
    ),
    api(
        ARQ_CREATE,
        "rule:project_member_or_service",
        dep(ARQ_CREATE, "rule:project_member_or_admin"),
        "Create accelerator request records.",
        &[op("POST", "/v2/accelerator_requests")],
    ),
    api(
        ARQ_DELETE,
        "rule:project_member_or_service",
        dep(ARQ_DELETE, "rule:admin_or_owner"),
        "Delete accelerator request records.",
        &[op("DELETE", "/v2/accelerator_requests")],
    ),
    api(
        ARQ_UPDATE,
        "rule:project_member_or_service",
        dep(ARQ_UPDATE, "rule:admin_or_owner"),
        "Update accelerator request records.",
        &[op("PATCH", "/v2/accelerator_requests")],
    ),
    api(
        DEVICE_GET_ALL,
        "rule:project_manager_or_admin",
        dep(DEVICE_GET_ALL, "rule:admin_api"),
        "Retrieve all device records",
        &[op("GET", "/v2/devices")],
    ),
    api(
        DEVICE_GET_ONE,
        "rule:project_manager_or_admin",
        dep(DEVICE_GET_ONE, "rule:admin_api"),
        "Retrieve a specific device record",
        &[op("GET", "/v2/devices/{uuid}")],
    ),
    api(
        DEVICE_DISABLE,
        "rule:admin_api",
        None,
        "Disable a device",
        &[op("POST", "/v2/devices/{uuid}/disable")],
    ),
    api(
        DEVICE_ENABLE,
        "rule:admin_api",
        None,
        "Enable a device",
        &[op("POST", "/v2/devices/{uuid}/enable")],
    ),
    api(
        DEPLOYABLE_GET_ALL,
        "rule:project_manager_or_admin",
        dep(DEPLOYABLE_GET_ALL, "rule:admin_api"),
        "Retrieve all deployable records",
        &[op("GET", "/v2/deployables")],
    ),
    api(
        DEPLOYABLE_GET_ONE,
        "rule:project_manager_or_admin",
        dep(DEPLOYABLE_GET_ONE, "rule:admin_api"),
        "Retrieve a specific deployable",
        &[op("GET", "/v2/deployables/{uuid}")],
    ),
    api(
        DEPLOYABLE_PROGRAM,
        "rule:admin_api",
        None,
        "FPGA programming.",
        &[op("PATCH", "/v2/deployables/{uuid}/program")],
    ),
    api(
        ATTRIBUTE_GET_ALL,
        "rule:project_manager_or_admin",
        dep(ATTRIBUTE_GET_ALL, "rule:admin_api"),
        "Retrieve all attributes",
        &[op("GET", "/v2/attributes")],
    ),
    api(
        ATTRIBUTE_GET_ONE,
        "rule:project_manager_or_admin",
        dep(ATTRIBUTE_GET_ONE, "rule:admin_api"),
        "Retrieve a specific attribute",
        &[op("GET", "/v2/attributes/{uuid}")],
    ),
    api(
        ATTRIBUTE_CREATE,
        "rule:admin_api",
        None,
        "Create an attribute",
        &[op("POST", "/v2/attributes")],
    ),
    api(
        ATTRIBUTE_DELETE,
        "rule:admin_api",
        None,
        "Delete an attribute",
        &[op("DELETE", "/v2/attributes/{uuid}")],
    ),
    api(
        AGENT_REPORT,
        "rule:admin_api or rule:service_api",
        None,
        "Replace one host's hardware records with an agent's report (accel only).",
        &[op("PUT", "/v2/agent/hosts/{hostname}/devices")],
    ),
];
