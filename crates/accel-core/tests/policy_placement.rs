//! Placement's rule set against its acceptance tests.
//!
//! * `GABBI` restates a sample of upstream's `gabbits/*-rbac.yaml` (one test per file
//!   and persona, plus every `GET /usages` case): which persona gets 403 in legacy and
//!   secure-RBAC mode. A 403 there is `allowed = false`; any 2xx is `true`.
//! * `MATRIX` is every rule for every persona, produced by running upstream oslo.policy
//!   6.0.1 with Placement 16.0.0's `policies.list_rules()` (and, for the `open_*` rows,
//!   `open-policy.yaml` as the policy file): `Y` allowed, `.` denied, `s` refused for
//!   scope (`InvalidScope`). Columns follow `placement::RULES`.

use accel_core::policy::placement::{self, RULES};
use accel_core::policy::{Credentials, Decision, Policy, Scope, Target};

const LEGACY: bool = false;
const SECURE: bool = true;
const PROJECT_ID: &str = "PROJECT_ID";
const PROJECT_ID_ALT: &str = "PROJECT_ID_ALT";

/// A gabbi persona: how its request headers come out of noauth2 and oslo.context.
type Persona = fn() -> Credentials;

fn persona(roles: &str, project: Option<&str>, system: bool) -> Credentials {
    Credentials {
        roles: roles
            .split(',')
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect(),
        project_id: project.map(str::to_owned),
        user_id: Some("user".into()),
        system_scope: system.then(|| "all".to_owned()),
        ..Credentials::default()
    }
}

// The personas of the RBAC gabbits (their `*_headers` anchors after noauth2).
fn admin() -> Credentials {
    persona("admin", Some("admin_project_id"), false)
}
fn service() -> Credentials {
    persona("service", Some("service_project_id"), false)
}
fn system_admin() -> Credentials {
    persona("admin,member,reader", None, true)
}
fn system_reader() -> Credentials {
    persona("reader", None, true)
}
fn project_admin() -> Credentials {
    persona("admin,member,reader", Some(PROJECT_ID), false)
}
fn project_member() -> Credentials {
    persona("member,reader", Some(PROJECT_ID), false)
}
fn project_reader() -> Credentials {
    persona("reader", Some(PROJECT_ID), false)
}
fn alt_project_admin() -> Credentials {
    persona("admin,member,reader", Some(PROJECT_ID_ALT), false)
}
fn alt_project_member() -> Credentials {
    persona("member,reader", Some(PROJECT_ID_ALT), false)
}
fn alt_project_reader() -> Credentials {
    persona("reader", Some(PROJECT_ID_ALT), false)
}
/// usage-legacy-rbac.yaml uses a fixed project id of its own.
fn other_project_admin() -> Credentials {
    persona(
        "admin,member,reader",
        Some("9520f97991e94f30a8dd205ef3ce735a"),
        false,
    )
}
fn other_project_member() -> Credentials {
    persona(
        "member,reader",
        Some("9520f97991e94f30a8dd205ef3ce735a"),
        false,
    )
}
/// The open-policy gabbits' caller: token `user`, no `X-Roles`.
fn no_roles() -> Credentials {
    persona("", Some("user"), false)
}
fn domain_admin() -> Credentials {
    Credentials {
        domain_id: Some("default".into()),
        ..persona("admin", None, false)
    }
}

/// The target Placement passes: the queried project for `GET /usages`, else the
/// caller's own project and user.
fn target_for(rule: &str, creds: &Credentials, usages_project: Option<&str>) -> Target {
    match usages_project {
        Some(p) if rule == placement::USAGES => Target::new().with("project_id", p),
        _ => Target::from_credentials(creds),
    }
}

struct GabbiCase {
    file: &'static str,
    test: &'static str,
    secure: bool,
    creds: Persona,
    rule: &'static str,
    usages_project: Option<&'static str>,
    allowed: bool,
}

const fn gabbi(
    file: &'static str,
    test: &'static str,
    secure: bool,
    creds: Persona,
    rule: &'static str,
    usages_project: Option<&'static str>,
    allowed: bool,
) -> GabbiCase {
    GabbiCase {
        file,
        test,
        secure,
        creds,
        rule,
        usages_project,
        allowed,
    }
}

#[rustfmt::skip]
const GABBI: &[GabbiCase] = &[
    gabbi("aggregate-legacy-rbac.yaml", "system reader cannot update aggregates", LEGACY, system_reader, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-legacy-rbac.yaml", "project member cannot update aggregates", LEGACY, project_member, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-legacy-rbac.yaml", "project reader cannot update aggregates", LEGACY, project_reader, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-secure-rbac.yaml", "system reader cannot update aggregates", SECURE, system_reader, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-secure-rbac.yaml", "project member cannot update aggregates", SECURE, project_member, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-secure-rbac.yaml", "project reader cannot update aggregates", SECURE, project_reader, "placement:resource_providers:aggregates:update", None, false),
    gabbi("aggregate-secure-rbac.yaml", "system admin cannot update aggregates", SECURE, system_admin, "placement:resource_providers:aggregates:update", None, false),
    gabbi("allocation-candidates-legacy-rbac.yaml", "system admin cannot get allocation candidates", LEGACY, system_admin, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-legacy-rbac.yaml", "system reader cannot get allocation candidates", LEGACY, system_reader, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-legacy-rbac.yaml", "project admin can get allocation candidates", LEGACY, project_admin, "placement:allocation_candidates:list", None, true),
    gabbi("allocation-candidates-legacy-rbac.yaml", "project member cannot get allocation candidates", LEGACY, project_member, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-legacy-rbac.yaml", "project reader cannot allocation candidates", LEGACY, project_reader, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-secure-rbac.yaml", "admin can get allocation candidates", SECURE, admin, "placement:allocation_candidates:list", None, true),
    gabbi("allocation-candidates-secure-rbac.yaml", "service can get allocation candidates", SECURE, service, "placement:allocation_candidates:list", None, true),
    gabbi("allocation-candidates-secure-rbac.yaml", "system admin cannot get allocation candidates", SECURE, system_admin, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-secure-rbac.yaml", "system reader cannot get allocation candidates", SECURE, system_reader, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-secure-rbac.yaml", "project admin can get allocation candidates", SECURE, project_admin, "placement:allocation_candidates:list", None, true),
    gabbi("allocation-candidates-secure-rbac.yaml", "project member cannot get allocation candidates", SECURE, project_member, "placement:allocation_candidates:list", None, false),
    gabbi("allocation-candidates-secure-rbac.yaml", "project reader cannot allocation candidates", SECURE, project_reader, "placement:allocation_candidates:list", None, false),
    gabbi("allocations-legacy-rbac.yaml", "project member cannot update allocation", LEGACY, project_member, "placement:allocations:update", None, false),
    gabbi("allocations-legacy-rbac.yaml", "project reader cannot update allocation", LEGACY, project_reader, "placement:allocations:update", None, false),
    gabbi("allocations-legacy-rbac.yaml", "system reader cannot update allocation", LEGACY, system_reader, "placement:allocations:update", None, false),
    gabbi("allocations-secure-rbac.yaml", "project member cannot update allocation", SECURE, project_member, "placement:allocations:update", None, false),
    gabbi("allocations-secure-rbac.yaml", "project reader cannot update allocation", SECURE, project_reader, "placement:allocations:update", None, false),
    gabbi("allocations-secure-rbac.yaml", "system reader cannot update allocation", SECURE, system_reader, "placement:allocations:update", None, false),
    gabbi("allocations-secure-rbac.yaml", "system admin cannot update allocation", SECURE, system_admin, "placement:allocations:update", None, false),
    gabbi("inventory-secure-rbac.yaml", "system reader cannot list inventories", SECURE, system_reader, "placement:resource_providers:inventories:list", None, false),
    gabbi("inventory-secure-rbac.yaml", "project member cannot list inventories", SECURE, project_member, "placement:resource_providers:inventories:list", None, false),
    gabbi("inventory-secure-rbac.yaml", "project reader cannot list inventories", SECURE, project_reader, "placement:resource_providers:inventories:list", None, false),
    gabbi("inventory-secure-rbac.yaml", "system admin cannot create an inventory", SECURE, system_admin, "placement:resource_providers:inventories:create", None, false),
    gabbi("reshaper-legacy-rbac.yaml", "project member cannot reshape", LEGACY, project_member, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "project reader cannot reshape", SECURE, project_reader, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "project member cannot reshape", SECURE, project_member, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "project admin cannot reshape", SECURE, project_admin, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "system reader cannot reshape", SECURE, system_reader, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "system admin cannot reshape", SECURE, system_admin, "placement:reshaper:reshape", None, false),
    gabbi("reshaper-secure-rbac.yaml", "service can reshape", SECURE, service, "placement:reshaper:reshape", None, true),
    gabbi("resource-classes-legacy-rbac.yaml", "project member cannot list resource classes", LEGACY, project_member, "placement:resource_classes:list", None, false),
    gabbi("resource-classes-legacy-rbac.yaml", "project admin can list resource classes", LEGACY, project_admin, "placement:resource_classes:list", None, true),
    gabbi("resource-classes-secure-rbac.yaml", "project admin can list resource classes", SECURE, project_admin, "placement:resource_classes:list", None, true),
    gabbi("resource-classes-secure-rbac.yaml", "project member cannot list resource classes", SECURE, project_member, "placement:resource_classes:list", None, false),
    gabbi("resource-classes-secure-rbac.yaml", "project reader cannot list resource classes", SECURE, project_reader, "placement:resource_classes:list", None, false),
    gabbi("resource-classes-secure-rbac.yaml", "system reader cannot list resource classes", SECURE, system_reader, "placement:resource_classes:list", None, false),
    gabbi("resource-classes-secure-rbac.yaml", "system admin cannot list resource classes", SECURE, system_admin, "placement:resource_classes:list", None, false),
    gabbi("resource-classes-secure-rbac.yaml", "admin can list resource classes", SECURE, admin, "placement:resource_classes:list", None, true),
    gabbi("resource-classes-secure-rbac.yaml", "service can list resource classes", SECURE, service, "placement:resource_classes:list", None, true),
    gabbi("resource-provider-legacy-rbac.yaml", "system admin cannot list resource providers", LEGACY, system_admin, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-legacy-rbac.yaml", "system reader cannot list resource providers", LEGACY, system_reader, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-legacy-rbac.yaml", "project admin can list resource providers", LEGACY, project_admin, "placement:resource_providers:list", None, true),
    gabbi("resource-provider-legacy-rbac.yaml", "project member cannot list resource providers", LEGACY, project_member, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-legacy-rbac.yaml", "project reader cannot list resource providers", LEGACY, project_reader, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-secure-rbac.yaml", "admin can list resource providers", SECURE, admin, "placement:resource_providers:list", None, true),
    gabbi("resource-provider-secure-rbac.yaml", "service can list resource providers", SECURE, service, "placement:resource_providers:list", None, true),
    gabbi("resource-provider-secure-rbac.yaml", "system admin cannot list resource providers", SECURE, system_admin, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-secure-rbac.yaml", "system reader cannot list resource providers", SECURE, system_reader, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-secure-rbac.yaml", "project admin can list resource providers", SECURE, project_admin, "placement:resource_providers:list", None, true),
    gabbi("resource-provider-secure-rbac.yaml", "project member cannot list resource providers", SECURE, project_member, "placement:resource_providers:list", None, false),
    gabbi("resource-provider-secure-rbac.yaml", "project reader cannot list resource providers", SECURE, project_reader, "placement:resource_providers:list", None, false),
    gabbi("traits-legacy-rbac.yaml", "project member cannot list traits", LEGACY, project_member, "placement:traits:list", None, false),
    gabbi("traits-legacy-rbac.yaml", "project admin can list traits", LEGACY, project_admin, "placement:traits:list", None, true),
    gabbi("traits-secure-rbac.yaml", "admin can list traits", SECURE, admin, "placement:traits:list", None, true),
    gabbi("traits-secure-rbac.yaml", "service can list traits", SECURE, service, "placement:traits:list", None, true),
    gabbi("traits-secure-rbac.yaml", "project admin can list traits", SECURE, project_admin, "placement:traits:list", None, true),
    gabbi("traits-secure-rbac.yaml", "project member cannot list traits", SECURE, project_member, "placement:traits:list", None, false),
    gabbi("traits-secure-rbac.yaml", "project reader cannot list traits", SECURE, project_reader, "placement:traits:list", None, false),
    gabbi("traits-secure-rbac.yaml", "system reader cannot list traits", SECURE, system_reader, "placement:traits:list", None, false),
    gabbi("traits-secure-rbac.yaml", "system admin cannot list traits", SECURE, system_admin, "placement:traits:list", None, false),
    gabbi("usage-legacy-rbac.yaml", "project member cannot list provider usage", LEGACY, other_project_member, "placement:resource_providers:usages", None, false),
    gabbi("usage-legacy-rbac.yaml", "project member cannot get total usage for project", LEGACY, other_project_member, "placement:usages", Some("PROJECT_ID"), false),
    gabbi("usage-legacy-rbac.yaml", "project admin can get total usage for project", LEGACY, other_project_admin, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "project admin can list provider usage", SECURE, project_admin, "placement:resource_providers:usages", None, true),
    gabbi("usage-secure-rbac.yaml", "service can list provider usage", SECURE, service, "placement:resource_providers:usages", None, true),
    gabbi("usage-secure-rbac.yaml", "project member cannot list provider usage", SECURE, project_member, "placement:resource_providers:usages", None, false),
    gabbi("usage-secure-rbac.yaml", "project reader cannot list provider usage", SECURE, project_reader, "placement:resource_providers:usages", None, false),
    gabbi("usage-secure-rbac.yaml", "system reader cannot list provider usage", SECURE, system_reader, "placement:resource_providers:usages", None, false),
    gabbi("usage-secure-rbac.yaml", "system admin cannot list provider usage", SECURE, system_admin, "placement:resource_providers:usages", None, false),
    gabbi("usage-secure-rbac.yaml", "project admin can get total usage for project", SECURE, project_admin, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "project member can get total usage for project", SECURE, project_member, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "project reader can get total usage for project", SECURE, project_reader, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "project member cannot get total usage for unauthorized project", SECURE, alt_project_member, "placement:usages", Some("PROJECT_ID"), false),
    gabbi("usage-secure-rbac.yaml", "project reader cannot get total usage for unauthorized project", SECURE, alt_project_reader, "placement:usages", Some("PROJECT_ID"), false),
    gabbi("usage-secure-rbac.yaml", "admin can get total usage for other project", SECURE, alt_project_admin, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "admin can get total usage for project", SECURE, admin, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "service can get total usage for project", SECURE, service, "placement:usages", Some("PROJECT_ID"), true),
    gabbi("usage-secure-rbac.yaml", "system reader cannot get total usage for project", SECURE, system_reader, "placement:usages", Some("PROJECT_ID"), false),
    gabbi("usage-secure-rbac.yaml", "system admin cannot get total usage for project", SECURE, system_admin, "placement:usages", Some("PROJECT_ID"), false),
];

#[test]
fn gabbi_rbac_expectations_hold() {
    let legacy = Policy::placement(LEGACY);
    let secure = Policy::placement(SECURE);
    for case in GABBI {
        let policy = if case.secure { &secure } else { &legacy };
        let creds = (case.creds)();
        let target = target_for(case.rule, &creds, case.usages_project);
        let decision = policy
            .authorize(case.rule, &creds, &target)
            .expect("gabbi rules are registered");
        assert_eq!(
            decision.is_allowed(),
            case.allowed,
            "{} / {:?}: {} gave {decision:?}",
            case.file,
            case.test,
            case.rule
        );
    }
}

#[rustfmt::skip]
const MATRIX: &[(&str, &str, &str)] = &[
    ("legacy", "admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("legacy", "service", ".YY.YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("legacy", "system_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("legacy", "system_reader", "sssYssssssssssssssssssssssssssssssssss"),
    ("legacy", "project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("legacy", "project_member", "...YY..................Y.............."),
    ("legacy", "project_reader", "...YY..................Y.............."),
    ("legacy", "alt_project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("legacy", "alt_project_member", "...YY................................."),
    ("legacy", "alt_project_reader", "...YY................................."),
    ("legacy", "no_roles", "......................................"),
    ("legacy", "domain_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("secure", "admin", "Y.Y.YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY."),
    ("secure", "service", ".YY.YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("secure", "system_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("secure", "system_reader", "sssYssssssssssssssssssssssssssssssssss"),
    ("secure", "project_admin", "Y.YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY."),
    ("secure", "project_member", "...YY..................Y.............."),
    ("secure", "project_reader", "...YY..................Y.............."),
    ("secure", "alt_project_admin", "Y.YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY."),
    ("secure", "alt_project_member", "...YY................................."),
    ("secure", "alt_project_reader", "...YY................................."),
    ("secure", "no_roles", "......................................"),
    ("secure", "domain_admin", "sss.ssssssssssssssssssssssssssssssssss"),
    ("open_legacy", "admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "service", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "system_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("open_legacy", "system_reader", "sssYssssssssssssssssssssssssssssssssss"),
    ("open_legacy", "project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "project_member", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "project_reader", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "alt_project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "alt_project_member", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "alt_project_reader", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "no_roles", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_legacy", "domain_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("open_secure", "admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "service", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "system_admin", "sssYssssssssssssssssssssssssssssssssss"),
    ("open_secure", "system_reader", "sssYssssssssssssssssssssssssssssssssss"),
    ("open_secure", "project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "project_member", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "project_reader", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "alt_project_admin", "YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "alt_project_member", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "alt_project_reader", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "no_roles", ".YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY"),
    ("open_secure", "domain_admin", "sssYssssssssssssssssssssssssssssssssss"),
];

/// `open-policy.yaml` from the conformance kit: upstream's OpenPolicyFixture, every
/// rule but `admin_api` set to `@`.
const OPEN_POLICY: &str = r#""admin_or_project_reader_or_service_api": "@"
"admin_or_service_api": "@"
"placement:allocation_candidates:list": "@"
"placement:allocations:delete": "@"
"placement:allocations:list": "@"
"placement:allocations:manage": "@"
"placement:allocations:update": "@"
"placement:reshaper:reshape": "@"
"placement:resource_classes:create": "@"
"placement:resource_classes:delete": "@"
"placement:resource_classes:list": "@"
"placement:resource_classes:show": "@"
"placement:resource_classes:update": "@"
"placement:resource_providers:aggregates:list": "@"
"placement:resource_providers:aggregates:update": "@"
"placement:resource_providers:allocations:list": "@"
"placement:resource_providers:create": "@"
"placement:resource_providers:delete": "@"
"placement:resource_providers:inventories:create": "@"
"placement:resource_providers:inventories:delete": "@"
"placement:resource_providers:inventories:list": "@"
"placement:resource_providers:inventories:show": "@"
"placement:resource_providers:inventories:update": "@"
"placement:resource_providers:list": "@"
"placement:resource_providers:show": "@"
"placement:resource_providers:traits:delete": "@"
"placement:resource_providers:traits:list": "@"
"placement:resource_providers:traits:update": "@"
"placement:resource_providers:update": "@"
"placement:resource_providers:usages": "@"
"placement:traits:delete": "@"
"placement:traits:list": "@"
"placement:traits:show": "@"
"placement:traits:update": "@"
"placement:usages": "@"
"project_reader_api": "@"
"service_api": "@"
"#;

#[test]
fn every_rule_and_persona_matches_upstream_oslo_policy() {
    let open = |secure| {
        Policy::placement(secure)
            .with_overrides_yaml(OPEN_POLICY)
            .expect("open policy parses")
    };
    let modes = [
        ("legacy", Policy::placement(LEGACY)),
        ("secure", Policy::placement(SECURE)),
        ("open_legacy", open(LEGACY)),
        ("open_secure", open(SECURE)),
    ];
    let personas: [(&str, Persona); 12] = [
        ("admin", admin),
        ("service", service),
        ("system_admin", system_admin),
        ("system_reader", system_reader),
        ("project_admin", project_admin),
        ("project_member", project_member),
        ("project_reader", project_reader),
        ("alt_project_admin", alt_project_admin),
        ("alt_project_member", alt_project_member),
        ("alt_project_reader", alt_project_reader),
        ("no_roles", no_roles),
        ("domain_admin", domain_admin),
    ];
    assert_eq!(MATRIX.len(), modes.len() * personas.len());
    for (mode, who, expected) in MATRIX {
        let (_, policy) = modes.iter().find(|(m, _)| m == mode).unwrap();
        let (_, creds) = personas.iter().find(|(p, _)| p == who).unwrap();
        let creds = creds();
        let got: String = RULES
            .iter()
            .map(|r| {
                let target = target_for(r.name, &creds, Some(PROJECT_ID));
                match policy.authorize(r.name, &creds, &target).unwrap() {
                    Decision::Allowed => 'Y',
                    Decision::Denied => '.',
                    Decision::WrongScope { .. } => 's',
                }
            })
            .collect();
        assert_eq!(&got, expected, "{mode} {who}");
    }
}

#[test]
fn rule_table_matches_upstream() {
    assert_eq!(RULES.len(), 38);
    let legacy = Policy::placement(LEGACY);
    let secure = Policy::placement(SECURE);
    // Effective checks, as oslo.policy prints them after `load_rules`.
    let expected = [
        (placement::ADMIN_API, "role:admin", "role:admin"),
        (
            placement::SERVICE_API,
            "(role:service or role:admin)",
            "role:service",
        ),
        (
            placement::ADMIN_OR_PROJECT_READER_OR_SERVICE_API,
            "((role:admin or rule:project_reader_api or role:service) or role:admin)",
            "(role:admin or rule:project_reader_api or role:service)",
        ),
        (
            placement::PROJECT_READER_API,
            "((role:reader and project_id:%(project_id)s) or role:admin)",
            "(role:reader and project_id:%(project_id)s)",
        ),
        (
            placement::RESHAPER_RESHAPE,
            "rule:service_api",
            "rule:service_api",
        ),
        (
            placement::USAGES,
            "rule:admin_or_project_reader_or_service_api",
            "rule:admin_or_project_reader_or_service_api",
        ),
    ];
    for (name, in_legacy, in_secure) in expected {
        assert_eq!(
            legacy.effective_check(name).unwrap().to_string(),
            in_legacy,
            "{name}"
        );
        assert_eq!(
            secure.effective_check(name).unwrap().to_string(),
            in_secure,
            "{name}"
        );
    }
    for r in RULES {
        let want: &[Scope] = if r.name == placement::PROJECT_READER_API {
            &[]
        } else {
            &[Scope::Project]
        };
        assert_eq!(r.scope_types, want, "{}", r.name);
        if r.name.starts_with("placement:") {
            assert!(
                !r.operations.is_empty(),
                "{} documents its operations",
                r.name
            );
        }
    }
    assert!(legacy.undefined_references().is_empty());
}

#[test]
fn system_scope_is_refused_before_the_check_runs() {
    let policy = Policy::placement(LEGACY)
        .with_overrides_yaml("\"placement:traits:list\": \"@\"")
        .unwrap();
    let creds = system_admin();
    let d = policy
        .authorize(
            placement::TRAITS_LIST,
            &creds,
            &Target::from_credentials(&creds),
        )
        .unwrap();
    assert_eq!(
        d,
        Decision::WrongScope {
            token_scope: Scope::System
        }
    );
    assert!(!d.is_allowed());
}

#[test]
fn unknown_rule_is_an_error_not_a_denial() {
    let err = Policy::placement(SECURE)
        .authorize("placement:nope", &admin(), &Target::new())
        .unwrap_err();
    assert_eq!(err.0, "placement:nope");
}

#[test]
fn open_policy_opens_everything_but_admin_api() {
    for secure in [LEGACY, SECURE] {
        let policy = Policy::placement(secure)
            .with_overrides_yaml(OPEN_POLICY)
            .unwrap();
        let creds = no_roles();
        for r in RULES {
            let target = target_for(r.name, &creds, Some(PROJECT_ID));
            let allowed = policy
                .authorize(r.name, &creds, &target)
                .unwrap()
                .is_allowed();
            assert_eq!(allowed, r.name != placement::ADMIN_API, "{}", r.name);
        }
    }
}
