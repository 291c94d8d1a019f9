//! Policy files: how oslo.policy-syntax overrides (YAML or JSON) replace Placement's
//! defaults, add rules, interact with deprecated checks and fail when malformed.
//! Expectations marked "upstream" were checked against oslo.policy 6.0.1 with
//! Placement 16.0.0's rules loaded from a policy file.

use accel_core::policy::placement;
use accel_core::policy::{Credentials, Policy, PolicyError, Target};

const LEGACY: bool = false;
const SECURE: bool = true;

fn persona(roles: &str, project: &str) -> Credentials {
    Credentials {
        roles: roles.split(',').map(str::to_owned).collect(),
        project_id: Some(project.to_owned()),
        user_id: Some("user".into()),
        ..Credentials::default()
    }
}
fn admin() -> Credentials {
    persona("admin", "admin_project_id")
}
fn service() -> Credentials {
    persona("service", "service_project_id")
}
fn project_admin() -> Credentials {
    persona("admin,member,reader", "PROJECT_ID")
}
fn project_reader() -> Credentials {
    persona("reader", "PROJECT_ID")
}

#[test]
fn an_override_replaces_the_default_and_its_deprecated_check() {
    // Upstream: a file entry for a base rule wins in both modes, with no
    // deprecated `role:admin` OR-ed back in.
    for secure in [LEGACY, SECURE] {
        let policy = Policy::placement(secure)
            .with_overrides_yaml("\"admin_or_service_api\": \"role:service\"\n")
            .unwrap();
        let list = |c: Credentials| {
            policy
                .authorize(
                    placement::RESOURCE_PROVIDERS_LIST,
                    &c,
                    &Target::from_credentials(&c),
                )
                .unwrap()
                .is_allowed()
        };
        assert!(!list(project_admin()), "secure={secure}");
        assert!(list(service()), "secure={secure}");
        assert_eq!(
            policy
                .effective_check(placement::ADMIN_OR_SERVICE_API)
                .unwrap()
                .to_string(),
            "role:service"
        );
    }
}

#[test]
fn json_overrides_use_the_target() {
    let policy = Policy::placement(SECURE)
        .with_overrides_yaml(
            r#"{"placement:resource_providers:list": "role:reader and project_id:%(project_id)s"}"#,
        )
        .unwrap();
    let reader = project_reader();
    let own = Target::from_credentials(&reader);
    let other = Target::new().with("project_id", "other");
    let rule = placement::RESOURCE_PROVIDERS_LIST;
    assert!(policy.authorize(rule, &reader, &own).unwrap().is_allowed());
    assert!(!policy
        .authorize(rule, &reader, &other)
        .unwrap()
        .is_allowed());
    assert!(!policy
        .authorize(rule, &admin(), &Target::from_credentials(&admin()))
        .unwrap()
        .is_allowed());
}

#[test]
fn later_overrides_win_and_empty_files_change_nothing() {
    let policy = Policy::placement(SECURE)
        .with_overrides_yaml("")
        .and_then(|p| p.with_overrides_yaml("# only a comment\n"))
        .and_then(|p| p.with_overrides_yaml("placement:traits:list: '!'"))
        .and_then(|p| p.with_overrides_yaml("placement:traits:list: ''"))
        .unwrap();
    assert_eq!(
        policy
            .effective_check(placement::TRAITS_LIST)
            .unwrap()
            .to_string(),
        "@"
    );
    assert_eq!(
        policy
            .effective_check(placement::TRAITS_SHOW)
            .unwrap()
            .to_string(),
        "rule:admin_or_service_api"
    );
}

#[test]
fn a_policy_file_may_add_rules_of_its_own() {
    let policy = Policy::placement(SECURE)
        .with_overrides_yaml(
            "is_operator: role:operator\n\"placement:traits:list\": rule:is_operator or rule:admin_or_service_api\n",
        )
        .unwrap();
    let operator = persona("operator", "PROJECT_ID");
    let t = Target::from_credentials(&operator);
    assert!(policy
        .authorize(placement::TRAITS_LIST, &operator, &t)
        .unwrap()
        .is_allowed());
    assert!(!policy
        .authorize(placement::TRAITS_SHOW, &operator, &t)
        .unwrap()
        .is_allowed());
    // Rules the file adds are not registered, so handlers cannot authorize them.
    assert!(policy.authorize("is_operator", &operator, &t).is_err());
}

#[test]
fn legacy_list_syntax_and_null_values_are_read_as_oslo_does() {
    let policy = Policy::placement(SECURE)
        .with_overrides_yaml(
            r#"{
                "placement:traits:list": [["role:a", "role:b"], ["role:c"]],
                "placement:traits:show": [],
                "placement:traits:update": null
            }"#,
        )
        .unwrap();
    let show = |n| policy.effective_check(n).unwrap().to_string();
    assert_eq!(
        show(placement::TRAITS_LIST),
        "((role:a and role:b) or role:c)"
    );
    assert_eq!(show(placement::TRAITS_SHOW), "@");
    assert_eq!(show(placement::TRAITS_UPDATE), "@");
}

#[test]
fn bad_policy_files_fail_with_the_rule_named() {
    let err = |text: &str| {
        Policy::placement(SECURE)
            .with_overrides_yaml(text)
            .unwrap_err()
    };
    let e = err("\"placement:traits:list\": \"role:admin or\"");
    assert!(
        matches!(e, PolicyError::Parse { ref name, .. } if name == "placement:traits:list"),
        "{e}"
    );
    assert!(e.to_string().contains("placement:traits:list"), "{e}");
    assert!(matches!(err("- role:admin"), PolicyError::NotAMapping));
    assert!(matches!(err("a: [b"), PolicyError::Syntax(_)));
    assert!(matches!(err("a: 3"), PolicyError::BadValue { .. }));
    assert!(matches!(err("1: role:a"), PolicyError::BadName(_)));
    let cycle = err("a: rule:b\nb: rule:a or role:x\n\"placement:traits:list\": rule:a");
    assert!(
        matches!(cycle, PolicyError::Cycle(ref names) if names.len() == 3),
        "{cycle}"
    );
}

mod renamed_rules {
    //! oslo.policy's handling of a deprecated rule with a different name, checked
    //! against upstream with a one-rule set (`new:rule`, deprecated `old:rule`).
    use super::*;
    use accel_core::policy::{DeprecatedRule, RuleDefault};

    const RENAMED: &[RuleDefault] = &[RuleDefault {
        name: "new:rule",
        check: "role:new",
        scope_types: &[],
        deprecated: Some(DeprecatedRule {
            name: "old:rule",
            check: "role:old",
        }),
        description: "A renamed rule.",
        operations: &[],
    }];

    fn effective(secure: bool, file: &str) -> String {
        Policy::new(RENAMED.iter().copied(), secure)
            .and_then(|p| p.with_overrides_yaml(file))
            .unwrap()
            .effective_check("new:rule")
            .unwrap()
            .to_string()
    }

    #[test]
    fn follows_upstream() {
        let cases = [
            ("{}", "(role:new or role:old)", "role:new"),
            (
                "\"old:rule\": \"role:custom\"",
                "role:custom",
                "role:custom",
            ),
            (
                "\"old:rule\": \"role:old\"",
                "(role:new or role:old)",
                "role:new",
            ),
            (
                "\"old:rule\": \"rule:new:rule\"",
                "(role:new or role:old)",
                "role:new",
            ),
            (
                "{\"old:rule\": \"role:custom\", \"new:rule\": \"role:x\"}",
                "role:x",
                "role:x",
            ),
        ];
        for (file, legacy, secure) in cases {
            assert_eq!(effective(LEGACY, file), legacy, "legacy {file}");
            assert_eq!(effective(SECURE, file), secure, "secure {file}");
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let twice = [RENAMED[0], RENAMED[0]];
        assert!(matches!(
            Policy::new(twice, true),
            Err(PolicyError::Duplicate(_))
        ));
    }
}
