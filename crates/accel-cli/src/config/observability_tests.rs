//! The metrics port and the access log: defaults, flag, file.

use super::*;

#[test]
fn metrics_port_and_access_log_default_on_and_follow_flag_then_file() {
    let cfg = ServeConfig::load(ServeArgs::default()).unwrap();
    assert_eq!(cfg.metrics_listen, "127.0.0.1:9778");
    assert!(cfg.access_log);
    assert!(!cfg.server_config().unwrap().disable_access_log);
    let path = std::env::temp_dir().join(format!("accel-obs-config-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "metrics_listen = \"0.0.0.0:9100\"\naccess_log = false\n",
    )
    .unwrap();
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(cfg.metrics_listen, "0.0.0.0:9100");
    assert!(cfg.server_config().unwrap().disable_access_log);
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        metrics_listen: Some("127.0.0.1:1".into()),
        no_access_log: true,
        ..Default::default()
    })
    .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(cfg.metrics_listen, "127.0.0.1:1");
    assert!(!cfg.access_log);
}
