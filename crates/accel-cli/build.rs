//! Records the git commit the binary is built from, for `accel --version` (and every
//! subcommand's): an operator reporting a problem can say exactly what runs.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    // A source tarball has no repository: the version says so rather than failing.
    let commit = std::env::var("ACCEL_GIT_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    let suffix = if dirty && commit != "unknown" {
        "-dirty"
    } else {
        ""
    };
    println!("cargo:rustc-env=ACCEL_GIT_COMMIT={commit}{suffix}");
    println!("cargo:rerun-if-env-changed=ACCEL_GIT_COMMIT");
    // Rebuild when HEAD moves (a commit, a checkout); worktrees keep HEAD elsewhere.
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["rev-parse", "--git-path", "index"]),
    ]
    .into_iter()
    .flatten()
    {
        println!("cargo:rerun-if-changed={path}");
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
