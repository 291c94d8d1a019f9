//! Sets `ACCEL_COMMIT` for `accel_build_info{commit}`: the environment's value when
//! the packager sets one, else `git rev-parse --short=12 HEAD`, else `unknown` (a
//! source tarball without git).

fn main() {
    println!("cargo:rerun-if-env-changed=ACCEL_COMMIT");
    let commit = std::env::var("ACCEL_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            let c = String::from_utf8(out.stdout).ok()?.trim().to_owned();
            (out.status.success() && !c.is_empty()).then_some(c)
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ACCEL_COMMIT={commit}");
}
