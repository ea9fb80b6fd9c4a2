//! Shared by the cli tests that run the seed apps (`bench_apps`, `chaos`): the repository root
//! and the Squall builds of apps. Owns building app binaries with `make -C apps`; must not
//! run them.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `make -C apps ARGS`.
pub fn make(args: &[String]) -> Output {
    Command::new("make")
        .arg("-C")
        .arg(repo().join("apps"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run make")
}

/// `make -C apps SQUALL=1 bin/T...` for the Squall builds `targets` (`bin/...`), against the C
/// library of this test's own target folder when it has been built there. Panics with make's
/// output and the fix when it fails. Returns `apps/bin`.
pub fn make_squall_apps(targets: &[String]) -> PathBuf {
    let mut args = vec!["SQUALL=1".to_string()];
    let lib = std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().nth(3).map(|t| t.join("release")))
        .filter(|d| d.join("libsquall.so").is_file());
    if let Some(dir) = lib {
        args.push(format!("SQUALL_LIBDIR={}", dir.display()));
    }
    args.extend(targets.iter().cloned());
    let out = make(&args);
    assert!(
        out.status.success(),
        "`make -C apps {}` failed; build the C library first (`cargo build --release -p \
         squall-capi`, see apps/README.md), then rerun:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    repo().join("apps/bin")
}
