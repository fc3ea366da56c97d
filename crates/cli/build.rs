//! Build information for `capstan --version`: the git commit (when the source is a git
//! checkout and git is installed; "unknown" otherwise, as in a crate tarball), the target
//! triple and the profile.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=CAPSTAN_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=CAPSTAN_BUILD_TARGET={target}");
    println!("cargo:rustc-env=CAPSTAN_BUILD_PROFILE={profile}");
    // Every commit or checkout appends to HEAD's reflog, and staging changes the index:
    // rebuild the string then (paths asked of git, which knows where a worktree keeps them).
    for name in ["logs/HEAD", "HEAD", "index"] {
        let path = Command::new("git")
            .args(["rev-parse", "--git-path", name])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok());
        if let Some(path) = path.map(|p| p.trim().to_string()) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
