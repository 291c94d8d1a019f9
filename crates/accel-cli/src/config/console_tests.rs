//! The console's listener: default, flag, file, `--no-console`, `console = false`,
//! and noauth's loopback rule.

use super::*;

#[test]
fn console_defaults_on_follows_flag_then_file_and_turns_off() {
    let cfg = ServeConfig::load(args(&[])).unwrap();
    assert_eq!(cfg.console_addr(), Some("127.0.0.1:8790"));
    let path =
        std::env::temp_dir().join(format!("accel-console-config-{}.toml", std::process::id()));
    std::fs::write(&path, "console_listen = \"127.0.0.1:9999\"\n").unwrap();
    let cfg = ServeConfig::load(args(&["--config", path.to_str().unwrap()])).unwrap();
    assert_eq!(cfg.console_addr(), Some("127.0.0.1:9999"));
    let cfg = ServeConfig::load(args(&[
        "--config",
        path.to_str().unwrap(),
        "--console-listen",
        "127.0.0.1:0",
    ]))
    .unwrap();
    assert_eq!(cfg.console_addr(), Some("127.0.0.1:0"));
    let cfg =
        ServeConfig::load(args(&["--config", path.to_str().unwrap(), "--no-console"])).unwrap();
    assert_eq!(cfg.console_addr(), None);
    std::fs::write(&path, "console = false\n").unwrap();
    let cfg = ServeConfig::load(args(&["--config", path.to_str().unwrap()])).unwrap();
    assert_eq!(cfg.console_addr(), None);
    // noauth acts as admin on the console too: not on a public address.
    let err = ServeConfig::load(args(&["--console-listen", "0.0.0.0:8790"])).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(err.to_string().contains("console_listen"), "{err}");
}
