//! Cyborg's rule table: secure defaults in both legacy and new-defaults mode, and
//! overridable by a policy file like Placement's.

use accel_core::policy::cyborg::*;
use accel_core::policy::{Credentials, Policy, Target};

fn persona(roles: &str, project: &str) -> Credentials {
    let roles: Vec<String> = roles
        .split(',')
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    Credentials {
        is_admin: Some(roles.iter().any(|r| r == "admin")),
        roles,
        project_id: Some(project.to_owned()),
        user_id: Some("u".into()),
        ..Credentials::default()
    }
}

fn allowed(p: &Policy, rule: &str, c: &Credentials) -> bool {
    p.authorize(rule, c, &Target::from_credentials(c))
        .unwrap()
        .is_allowed()
}

#[test]
fn secure_defaults_in_both_modes() {
    for new_defaults in [false, true] {
        let p = Policy::cyborg(new_defaults);
        assert!(
            p.undefined_references().is_empty(),
            "{:?}",
            p.undefined_references()
        );
        let admin = persona("admin,member,reader", "p1");
        let manager = persona("manager,member,reader", "p1");
        let member = persona("member,reader", "p1");
        let reader = persona("reader", "p1");
        let service = persona("service", "svc");
        for rule in [
            DEVICE_PROFILE_GET_ALL,
            DEVICE_PROFILE_GET_ONE,
            ARQ_GET_ALL,
            ARQ_GET_ONE,
        ] {
            assert!(allowed(&p, rule, &reader), "{rule} {new_defaults}");
        }
        for rule in [
            DEVICE_PROFILE_CREATE,
            DEVICE_PROFILE_DELETE,
            ATTRIBUTE_CREATE,
            ATTRIBUTE_DELETE,
            DEVICE_ENABLE,
            DEVICE_DISABLE,
            DEPLOYABLE_PROGRAM,
            AGENT_REPORT,
        ] {
            assert!(allowed(&p, rule, &admin), "{rule}");
            assert!(!allowed(&p, rule, &member), "{rule} {new_defaults}");
            assert!(!allowed(&p, rule, &manager), "{rule} {new_defaults}");
        }
        for rule in [
            DEVICE_GET_ALL,
            DEVICE_GET_ONE,
            DEPLOYABLE_GET_ALL,
            DEPLOYABLE_GET_ONE,
            ATTRIBUTE_GET_ALL,
            ATTRIBUTE_GET_ONE,
        ] {
            assert!(allowed(&p, rule, &admin), "{rule}");
            assert!(allowed(&p, rule, &manager), "{rule}");
            assert!(
                !allowed(&p, rule, &member),
                "{rule} {new_defaults}: CVE-2026-40213"
            );
        }
        for rule in [ARQ_CREATE, ARQ_UPDATE, ARQ_DELETE] {
            assert!(allowed(&p, rule, &member), "{rule}");
            assert!(allowed(&p, rule, &service), "{rule}");
        }
        assert!(allowed(&p, AGENT_REPORT, &service));
        let system_admin = Credentials {
            system_scope: Some("all".into()),
            project_id: None,
            ..admin.clone()
        };
        assert!(
            !allowed(&p, DEVICE_GET_ALL, &system_admin),
            "project scope only"
        );
    }
    // Legacy mode keeps the deprecated owner check for ARQ creation by any project user.
    let legacy = Policy::cyborg(false);
    assert!(allowed(&legacy, ARQ_CREATE, &persona("", "p1")));
    assert!(!allowed(
        &Policy::cyborg(true),
        ARQ_CREATE,
        &persona("", "p1")
    ));
}

#[test]
fn a_policy_file_overrides_defaults() {
    let p = Policy::cyborg(true)
        .with_overrides_yaml(
            "\"cyborg:device:get_all\": \"role:member\"\nproject_reader_api: \"!\"\n",
        )
        .unwrap();
    let member = persona("member,reader", "p1");
    assert!(allowed(&p, DEVICE_GET_ALL, &member));
    assert!(!allowed(&p, DEVICE_GET_ONE, &member));
    assert!(
        !allowed(&p, DEVICE_PROFILE_GET_ALL, &persona("reader", "p1")),
        "base rule overridden"
    );
    assert!(allowed(&p, DEVICE_PROFILE_GET_ALL, &persona("admin", "p1")));
}
