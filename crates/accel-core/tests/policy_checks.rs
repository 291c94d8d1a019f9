//! The check-string language: parsing (precedence, parentheses, negation, errors) and
//! evaluation against credentials and a target.
//!
//! `ORACLE` was produced by running upstream oslo.policy 6.0.1 (`_parser.parse_rule`,
//! then `Enforcer.enforce` with an `oslo_context.RequestContext`) on each string; the
//! second column is oslo's canonical `str()` of the parsed tree, so it pins precedence
//! and grouping as well as the outcome.

use accel_core::policy::parser::Problem;
use accel_core::policy::{parse, Check, Credentials, Policy, Target};

/// (check string, oslo's canonical form, allowed for [project_reader, admin, system]).
const ORACLE: &[(&str, &str, [bool; 3])] = &[
    ("", "@", [true, true, true]),
    ("@", "@", [true, true, true]),
    ("!", "!", [false, false, false]),
    ("role:admin", "role:admin", [false, true, true]),
    ("role:ADMIN", "role:ADMIN", [false, true, true]),
    ("Role:admin", "Role:admin", [false, false, false]),
    ("rule:is_admin", "rule:is_admin", [false, true, true]),
    (
        "rule:nonexistent",
        "rule:nonexistent",
        [false, false, false],
    ),
    (
        "project_id:%(project_id)s",
        "project_id:%(project_id)s",
        [true, false, true],
    ),
    (
        "user_id:%(user_id)s",
        "user_id:%(user_id)s",
        [true, false, true],
    ),
    (
        "project_id:%(missing)s",
        "project_id:%(missing)s",
        [false, false, false],
    ),
    ("system_scope:all", "system_scope:all", [false, false, true]),
    ("system:all", "system:all", [false, false, true]),
    ("True:%(enabled)s", "True:%(enabled)s", [true, false, true]),
    (
        "'member':%(name)s",
        "'member':%(name)s",
        [true, false, true],
    ),
    (
        "\"member\":%(name)s",
        "\"member\":%(name)s",
        [true, false, true],
    ),
    (
        "None:%(project_id)s",
        "None:%(project_id)s",
        [false, false, true],
    ),
    ("42:%(count)s", "42:%(count)s", [true, false, true]),
    (
        "is_admin_project:True",
        "is_admin_project:True",
        [true, true, true],
    ),
    ("roles:admin", "roles:admin", [false, true, true]),
    ("roles:Admin", "roles:Admin", [false, false, false]),
    ("project_id:p1", "project_id:p1", [true, false, false]),
    ("project_id:None", "project_id:None", [false, false, true]),
    ("domain_id:None", "domain_id:None", [true, true, true]),
    ("role:%(role)s", "role:%(role)s", [true, false, true]),
    (
        "project_id:100%%",
        "project_id:100%%",
        [false, false, false],
    ),
    (
        "project_id:%(project_id)s-x",
        "project_id:%(project_id)s-x",
        [false, false, false],
    ),
    (
        "role:admin or role:reader and project_id:%(project_id)s",
        "(role:admin or (role:reader and project_id:%(project_id)s))",
        [true, true, true],
    ),
    (
        "(role:admin or role:reader) and project_id:%(project_id)s",
        "((role:admin or role:reader) and project_id:%(project_id)s)",
        [true, false, true],
    ),
    (
        "role:admin and role:reader or role:member and role:x",
        "((role:admin and role:reader) or (role:member and role:x))",
        [false, false, false],
    ),
    ("not role:admin", "not role:admin", [true, false, false]),
    (
        "not role:admin and role:reader",
        "(not role:admin and role:reader)",
        [true, false, false],
    ),
    (
        "not (role:admin or role:reader)",
        "not (role:admin or role:reader)",
        [false, false, false],
    ),
    (
        "not not role:admin",
        "not not role:admin",
        [false, true, true],
    ),
    (
        "role:a or role:b or role:c",
        "(role:a or role:b or role:c)",
        [false, false, false],
    ),
    (
        "role:a and role:b and role:c",
        "(role:a and role:b and role:c)",
        [false, false, false],
    ),
    (
        "role:reader AND NOT role:admin",
        "(role:reader and not role:admin)",
        [true, false, false],
    ),
    (
        "role:admin OR role:reader",
        "(role:admin or role:reader)",
        [true, true, true],
    ),
    ("((role:admin))", "role:admin", [false, true, true]),
    (
        "(role:admin or (role:reader and (project_id:%(project_id)s)))",
        "(role:admin or (role:reader and project_id:%(project_id)s))",
        [true, true, true],
    ),
    (
        "rule:is_admin or rule:owner",
        "(rule:is_admin or rule:owner)",
        [true, true, true],
    ),
    (
        "rule:is_reader and rule:owner",
        "(rule:is_reader and rule:owner)",
        [true, false, false],
    ),
    ("not rule:owner", "not rule:owner", [false, true, false]),
    (
        "role:member and not project_id:%(project_id)s or role:admin",
        "((role:member and not project_id:%(project_id)s) or role:admin)",
        [false, true, true],
    ),
    (
        "@ and role:admin",
        "(@ and role:admin)",
        [false, true, true],
    ),
    (
        "! or role:reader",
        "(! or role:reader)",
        [true, false, false],
    ),
    ("not @", "not @", [false, false, false]),
    ("not !", "not !", [true, true, true]),
    ("user.name:x", "user.name:x", [false, false, false]),
    (
        "service_roles:svc",
        "service_roles:svc",
        [false, false, true],
    ),
    (
        "service_user_id:None",
        "service_user_id:None",
        [true, true, true],
    ),
];

/// The three callers of `ORACLE`, each with the target it was evaluated against.
fn callers() -> [(Credentials, Target); 3] {
    let target = |project: &str, user: &str, enabled: &str, name: &str, count: &str, role: &str| {
        Target::new()
            .with("project_id", project)
            .with("user_id", user)
            .with("enabled", enabled)
            .with("name", name)
            .with("count", count)
            .with("role", role)
    };
    [
        (
            Credentials {
                user_id: Some("u1".into()),
                project_id: Some("p1".into()),
                roles: vec!["Reader".into(), "member".into()],
                ..Credentials::default()
            },
            target("p1", "u1", "True", "member", "42", "member"),
        ),
        (
            Credentials {
                user_id: Some("u2".into()),
                project_id: Some("p2".into()),
                roles: vec!["admin".into()],
                ..Credentials::default()
            },
            target("p1", "u1", "False", "x", "7", "x"),
        ),
        (
            Credentials {
                user_id: Some("u3".into()),
                roles: vec!["admin".into()],
                system_scope: Some("all".into()),
                service_roles: vec!["svc".into()],
                ..Credentials::default()
            },
            target("None", "u3", "True", "member", "42", "admin"),
        ),
    ]
}

/// The named rules `ORACLE` refers to, as a policy file would add them.
fn oracle_policy() -> Policy {
    Policy::new([], true)
        .and_then(|p| {
            p.with_overrides_yaml(
                "is_admin: role:admin\nis_reader: role:reader\nowner: project_id:%(project_id)s\n",
            )
        })
        .expect("oracle rules are valid")
}

#[test]
fn matches_oslo_policy_on_parse_and_evaluation() {
    let policy = oracle_policy();
    let callers = callers();
    for (rule, canonical, expected) in ORACLE {
        let check = parse(rule).unwrap_or_else(|e| panic!("{rule:?}: {e}"));
        assert_eq!(check.to_string(), *canonical, "canonical form of {rule:?}");
        for (i, (creds, target)) in callers.iter().enumerate() {
            assert_eq!(
                policy.check(&check, creds, target),
                expected[i],
                "{rule:?} for caller {i}"
            );
        }
    }
}

#[test]
fn and_binds_tighter_than_or_and_not_tighter_than_and() {
    let parsed = parse("role:a or role:b and not role:c").unwrap();
    assert_eq!(parsed.to_string(), "(role:a or (role:b and not role:c))");
    let grouped = parse("(role:a or role:b) and not (role:c or role:d)").unwrap();
    assert_eq!(
        grouped.to_string(),
        "((role:a or role:b) and not (role:c or role:d))"
    );
    assert!(matches!(grouped, Check::And(ref items) if items.len() == 2));
}

#[test]
fn parentheses_may_touch_checks_and_nest() {
    // Only the ends of a whitespace-free token are peeled, so this is one role named
    // `a)or(role:b`, exactly as oslo.policy reads it.
    let a = parse("((role:a)or(role:b))").unwrap();
    assert_eq!(a.to_string(), "role:a)or(role:b");
    assert!(parse("role:a) or (role:b").is_err());
    let b = parse("( ( role:a ) or ( role:b ) )").unwrap();
    assert_eq!(b, parse("role:a or role:b").unwrap());
    // A substitution's parentheses are not grouping.
    let c = parse("(project_id:%(project_id)s)").unwrap();
    assert_eq!(c.to_string(), "project_id:%(project_id)s");
}

#[test]
fn empty_string_always_allows_but_blank_is_an_error() {
    assert_eq!(parse("").unwrap(), Check::Always);
    assert_eq!(parse("   ").unwrap_err().problem, Problem::Blank);
}

#[test]
fn malformed_strings_are_errors_not_silent_denials() {
    // oslo.policy turns each of these into "never" after logging; we refuse them.
    fn variant(p: &Problem) -> &'static str {
        match p {
            Problem::Blank => "Blank",
            Problem::ExpectedCheck { .. } => "ExpectedCheck",
            Problem::ExpectedOperator { .. } => "ExpectedOperator",
            Problem::Unclosed => "Unclosed",
            Problem::NotACheck { .. } => "NotACheck",
            Problem::QuotedString { .. } => "QuotedString",
            Problem::EmptyPart { .. } => "EmptyPart",
            Problem::RemoteCheck { .. } => "RemoteCheck",
            Problem::BadSubstitution { .. } => "BadSubstitution",
        }
    }
    let cases = [
        ("role:admin and", "ExpectedCheck"),
        ("and role:admin", "ExpectedCheck"),
        ("role:admin role:reader", "ExpectedOperator"),
        ("(role:admin", "Unclosed"),
        ("role:admin)", "ExpectedOperator"),
        ("()", "ExpectedCheck"),
        ("not", "ExpectedCheck"),
        ("admin", "NotACheck"),
        ("'quoted'", "QuotedString"),
        ("role:admin or or role:reader", "ExpectedCheck"),
        ("role:admin not role:reader", "ExpectedOperator"),
        (":x", "EmptyPart"),
        ("rule:", "EmptyPart"),
        ("http://example.com/check", "RemoteCheck"),
        ("project_id:%(project_id)d", "BadSubstitution"),
        ("project_id:100%", "BadSubstitution"),
        ("project_id:%(project_id", "BadSubstitution"),
    ];
    for (rule, expected) in cases {
        let err = parse(rule).expect_err(rule);
        assert_eq!(
            variant(&err.problem),
            expected,
            "{rule:?} gave {:?}",
            err.problem
        );
        assert_eq!(err.rule, rule);
        assert!(
            err.to_string().contains(rule),
            "message names the string: {err}"
        );
    }
}

#[test]
fn role_checks_ignore_case_but_generic_checks_do_not() {
    let policy = oracle_policy();
    let creds = Credentials {
        roles: vec!["Admin".into()],
        ..Credentials::default()
    };
    let t = Target::new();
    assert!(policy.check(&parse("role:ADMIN").unwrap(), &creds, &t));
    assert!(!policy.check(&parse("roles:admin").unwrap(), &creds, &t));
    assert!(policy.check(&parse("roles:Admin").unwrap(), &creds, &t));
}

#[test]
fn a_missing_target_key_fails_closed() {
    let policy = oracle_policy();
    let creds = Credentials {
        project_id: Some("p".into()),
        roles: vec!["p".into()],
        ..Credentials::default()
    };
    for rule in [
        "project_id:%(nope)s",
        "role:%(nope)s",
        "not not role:%(nope)s",
    ] {
        assert!(
            !policy.check(&parse(rule).unwrap(), &creds, &Target::new()),
            "{rule}"
        );
    }
    assert!(policy.check(&parse("not role:%(nope)s").unwrap(), &creds, &Target::new()));
}

#[test]
fn target_from_credentials_mirrors_python_none() {
    let creds = Credentials {
        user_id: Some("u".into()),
        system_scope: Some("all".into()),
        ..Credentials::default()
    };
    let t = Target::from_credentials(&creds);
    assert_eq!(t.get("project_id"), Some("None"));
    assert_eq!(t.get("user_id"), Some("u"));
}
