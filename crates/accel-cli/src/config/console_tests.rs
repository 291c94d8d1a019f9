//! The console's listener: default, flag, file, `--no-console`, `console = false`,
//! and noauth's loopback rule.

use super::*;

#[test]
fn console_defaults_on_follows_flag_then_file_and_turns_off() {
    let cfg = ServeConfig::load(ServeArgs::default()).unwrap();
    assert_eq!(cfg.console_listen.as_deref(), Some("127.0.0.1:8790"));
    let path =
        std::env::temp_dir().join(format!("accel-console-config-{}.toml", std::process::id()));
    std::fs::write(&path, "console_listen = \"127.0.0.1:9999\"\n").unwrap();
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(cfg.console_listen.as_deref(), Some("127.0.0.1:9999"));
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        console_listen: Some("127.0.0.1:0".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(cfg.console_listen.as_deref(), Some("127.0.0.1:0"));
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        no_console: true,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(cfg.console_listen, None);
    std::fs::write(&path, "console = false\n").unwrap();
    let cfg = ServeConfig::load(ServeArgs {
        config: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(cfg.console_listen, None);
    // noauth acts as admin on the console too: not on a public address.
    let err = ServeConfig::load(ServeArgs {
        console_listen: Some("0.0.0.0:8790".into()),
        ..Default::default()
    })
    .unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(err.to_string().contains("console_listen"), "{err}");
}
