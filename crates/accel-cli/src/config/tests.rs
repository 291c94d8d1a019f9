//! The configuration's tests by topic: the metrics port, the external Placement,
//! Keystone, and the bind worker (the noauth ones stay beside `is_loopback`).

mod observability_config_tests {
    use crate::config::*;

    #[test]
    fn metrics_port_and_access_log_default_on_and_follow_flag_then_file() {
        let cfg = ServeConfig::load(args(&[])).unwrap();
        assert_eq!(cfg.metrics_listen, "127.0.0.1:9778");
        assert!(cfg.access_log);
        assert!(!cfg.server_config().unwrap().disable_access_log);
        let path =
            std::env::temp_dir().join(format!("accel-obs-config-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "metrics_listen = \"0.0.0.0:9100\"\naccess_log = false\n",
        )
        .unwrap();
        let cfg = ServeConfig::load(args(&["--config", path.to_str().unwrap()])).unwrap();
        assert_eq!(cfg.metrics_listen, "0.0.0.0:9100");
        assert!(cfg.server_config().unwrap().disable_access_log);
        let cfg = ServeConfig::load(args(&[
            "--config",
            path.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:1",
            "--no-access-log",
        ]))
        .unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(cfg.metrics_listen, "127.0.0.1:1");
        assert!(!cfg.access_log);
    }
}

mod placement_config_tests {
    use crate::config::*;

    fn load(text: &str) -> anyhow::Result<ServeConfig> {
        let path = std::env::temp_dir().join(format!(
            "accel-placement-config-{}-{}.toml",
            std::process::id(),
            uuid_like(text)
        ));
        std::fs::write(&path, text).unwrap();
        let result = ServeConfig::load(args(&["--config", path.to_str().unwrap()]));
        let _ = std::fs::remove_file(&path);
        result
    }

    fn uuid_like(text: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        h.finish()
    }

    #[test]
    fn no_table_no_external_placement() {
        assert!(load("").unwrap().placement.is_none());
    }

    #[test]
    fn keystoneauth_names_are_read() {
        let cfg = load(
            "[placement]\n\
             auth_type = \"password\"\n\
             auth_url = \"http://ks:5000/v3\"\n\
             username = \"cyborg\"\n\
             password = \"pw\"\n\
             project_name = \"service\"\n\
             region_name = \"RegionOne\"\n\
             interface = \"internal\"\n",
        )
        .unwrap();
        let p = cfg.placement.unwrap();
        assert_eq!(p.region_name.as_deref(), Some("RegionOne"));
        assert!(!format!("{p:?}").contains("pw"), "password not logged");
    }

    #[test]
    fn typos_and_bad_values_stop_the_server_naming_them() {
        let err = format!(
            "{:#}",
            load("[placement]\nendpoint = \"http://p\"\ntoken = \"t\"\n").unwrap_err()
        );
        assert!(err.contains("unknown field `endpoint`"), "{err}");
        let err = load("[placement]\ntoken = \"t\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("endpoint_override"), "{err}");
        let err = load("[placement]\nauth_url = \"http://ks\"\nusername = \"u\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing: password, project_name"), "{err}");
    }
}

mod keystone_config_tests {
    use crate::config::*;

    /// Loads `text` as the config file, with only `--auth-strategy keystone` given.
    fn load(text: &str) -> anyhow::Result<ServeConfig> {
        let path = std::env::temp_dir().join(format!("accel-config-test-{}.toml", unique_suffix()));
        std::fs::write(&path, text).unwrap();
        let result = ServeConfig::load(args(&[
            "--config",
            path.to_str().unwrap(),
            "--auth-strategy",
            "keystone",
        ]));
        let _ = std::fs::remove_file(&path);
        result
    }

    fn unique_suffix() -> String {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        )
    }

    const KS: &str = "[keystone_authtoken]\nauth_url = \"http://ks/v3\"\nusername = \"u\"\n\
                      password = \"p\"\nproject_name = \"s\"\n";

    #[test]
    fn nova_table_is_a_keystone_session_with_keystoneauth_names() {
        let cfg = load(&format!(
            "{KS}[nova]\nauth_url = \"https://ks:5000\"\nusername = \"cyborg\"\n\
             password = \"pw\"\nproject_name = \"service\"\nregion_name = \"R1\"\n\
             interface = \"internal\"\n"
        ))
        .unwrap();
        let n = cfg.nova.unwrap();
        assert_eq!(
            (
                n.username.as_str(),
                n.interface.as_str(),
                n.region_name.as_deref()
            ),
            ("cyborg", "internal", Some("R1"))
        );
        assert_eq!(n.user_domain_name, "Default");
        for (bad, why) in [
            ("interface = \"private\"\n", "[nova] interface"),
            (
                "endpoint_override = \"nova:8774\"\n",
                "[nova] endpoint_override",
            ),
            ("region = \"R1\"\n", "region"),
        ] {
            let err = format!(
                "{:#}",
                load(&format!(
                    "{KS}[nova]\nauth_url = \"http://ks\"\nusername = \"c\"\n\
                     password = \"p\"\nproject_name = \"s\"\n{bad}"
                ))
                .unwrap_err()
            );
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = load(&format!(
            "nova_token = \"t\"\n{KS}[nova]\nauth_url = \"http://ks\"\nusername = \"c\"\n\
             password = \"p\"\nproject_name = \"s\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("keep one"), "{err}");
    }

    #[test]
    fn keystone_needs_its_table() {
        let err = load("").unwrap_err().to_string();
        assert!(err.contains("[keystone_authtoken]"), "{err}");
    }

    #[test]
    fn keystone_table_with_keystonemiddleware_names() {
        let cfg = load(
            "[keystone_authtoken]\n\
             auth_url = \"http://127.0.0.1:5000/v3\"\n\
             username = \"cyborg\"\n\
             password = \"pw\"\n\
             project_name = \"service\"\n\
             service_token_roles = [\"service\", \"nova\"]\n\
             service_token_roles_required = false\n\
             token_cache_time = 60\n",
        )
        .unwrap();
        let k = cfg.keystone_authtoken.as_ref().unwrap();
        assert_eq!(k.service_token_roles, ["service", "nova"]);
        assert!(!k.service_token_roles_required);
        assert_eq!(k.token_cache_time, 60);
        let server = cfg.server_config().unwrap();
        assert_eq!(server.auth_strategy, AuthStrategy::Keystone);
        assert!(server.keystone.is_some());
    }

    #[test]
    fn keystone_table_typos_fail_at_start() {
        let err = format!(
            "{:#}",
            load(
                "[keystone_authtoken]\n\
                 auth_url = \"http://ks/v3\"\n\
                 username = \"u\"\n\
                 password = \"p\"\n\
                 project_name = \"s\"\n\
                 service_token_role = [\"service\"]\n",
            )
            .unwrap_err()
        );
        assert!(err.contains("unknown field `service_token_role`"), "{err}");
        let err = load(
            "[keystone_authtoken]\nauth_url = \"ldap://ks/v3\"\nusername = \"u\"\n\
             password = \"p\"\nproject_name = \"s\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("http:// or https://"), "{err}");
    }
}

mod bind_config_tests {
    use crate::config::*;

    #[test]
    fn bind_concurrency_defaults_follows_flag_then_file_and_is_bounded() {
        // SQLite (the embedded default or a sqlite:// URL): one at a time; a server
        // database: DEFAULT_CONCURRENCY.
        let cfg = ServeConfig::load(args(&[])).unwrap();
        assert_eq!(cfg.bind_concurrency(), 1);
        for (url, want) in [
            ("sqlite:///var/lib/accel/accel.db", 1),
            ("postgres://accel@db:5432/accel", 4),
            ("postgresql://accel@db/accel", 4),
            ("mysql://accel@db:3306/accel", 4),
            ("mariadb://accel@db:3306/accel", 4),
        ] {
            let cfg = ServeConfig::load(args(&["--database", url])).unwrap();
            assert_eq!(cfg.bind_concurrency(), want, "{url}");
        }
        assert_eq!(accel_server::accelerator::binder::DEFAULT_CONCURRENCY, 4);
        let path =
            std::env::temp_dir().join(format!("accel-bind-config-{}.toml", std::process::id()));
        std::fs::write(&path, "bind_concurrency = 3\n").unwrap();
        let from_file = ServeConfig::load(args(&["--config", path.to_str().unwrap()]));
        let from_flag = ServeConfig::load(args(&[
            "--config",
            path.to_str().unwrap(),
            "--bind-concurrency",
            "12",
        ]));
        let _ = std::fs::remove_file(&path);
        assert_eq!(from_file.unwrap().bind_concurrency(), 3);
        assert_eq!(from_flag.unwrap().bind_concurrency(), 12);
        for bad in [0, 65] {
            let err = ServeConfig::load(args(&["--bind-concurrency", &bad.to_string()]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("bind_concurrency must be between 1 and 64"),
                "{err}"
            );
        }
    }
}

mod admission_config_tests {
    use crate::config::*;

    #[test]
    fn admission_limits_default_from_the_cores_and_follow_flags_and_file() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Off by default: no limit.
        let cfg = ServeConfig::load(args(&[])).unwrap();
        assert_eq!(
            cfg.admission_limits(),
            accel_server::admission::Limits::default()
        );
        assert_eq!(cfg.admission_limits().candidates, 0);
        // On: sized from the cores.
        let cfg = ServeConfig::load(args(&["--admission", "true"])).unwrap();
        assert_eq!(
            cfg.admission_limits(),
            accel_server::admission::Limits::for_cores(cores)
        );
        assert_eq!(cfg.admission_limits().candidates, 2 * cores);
        let path =
            std::env::temp_dir().join(format!("accel-admission-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "admission = true\nadmission_reads = 0\nadmission_wait_ms = 250\n",
        )
        .unwrap();
        let cfg = ServeConfig::load(args(&[
            "--config",
            path.to_str().unwrap(),
            "--admission-candidates",
            "3",
            "--admission-retry-after",
            "5",
        ]));
        let _ = std::fs::remove_file(&path);
        let l = cfg.unwrap().admission_limits();
        assert_eq!((l.candidates, l.reads, l.retry_after_secs), (3, 0, 5));
        assert_eq!(l.wait, std::time::Duration::from_millis(250));
        let err = ServeConfig::load(args(&["--admission-retry-after", "0"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("admission_retry_after_seconds must be between 1 and 3600"),
            "{err}"
        );
        let err = ServeConfig::load(args(&["--admission-wait-ms", "60001"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("admission_wait_ms must be at most 60000"),
            "{err}"
        );
    }
}

mod declaration_docs_tests {
    use crate::config::*;

    /// docs/configuration.md's table of `accel serve`'s keys and `accel serve --help` both come
    /// from the declaration: neither can name a default the code does not use.
    #[test]
    fn readme_table_and_help_follow_the_declaration() {
        let keys = ServeConfig::keys();
        let readme =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        accel_settings::check_doc_table(&readme, "serve", &accel_settings::markdown_table(&keys))
            .unwrap();
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for k in &keys {
            let Some(flag) = &k.flag else { continue };
            let at = help
                .find(&format!("{flag} "))
                .or_else(|| help.find(&format!("{flag}\n")))
                .unwrap_or_else(|| panic!("{flag} not in --help:\n{help}"));
            let entry = &help[at..];
            let entry = &entry[..entry[2..].find("\n  -").map_or(entry.len(), |e| e + 2)];
            if let Some(d) = &k.default {
                assert!(entry.contains(&format!("[default: {d}]")), "{entry}");
            }
            if let Some(e) = &k.env {
                assert!(entry.contains(e.as_str()), "{entry}");
            }
        }
        // The defaults are the ones the code applies.
        let cfg = ServeConfig::load(args(&[])).unwrap();
        let default_of = |name: &str| {
            keys.iter()
                .find(|k| k.name == name)
                .and_then(|k| k.default.clone())
                .unwrap()
        };
        assert_eq!(default_of("placement_listen"), cfg.placement_listen);
        assert_eq!(
            default_of("bind_timeout_seconds"),
            cfg.bind_timeout_seconds.to_string()
        );
    }
}
