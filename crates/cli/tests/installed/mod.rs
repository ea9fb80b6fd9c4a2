//! Shared by the cli tests that build C programs against the installed library (`bench_kernels`,
//! `bench_omp`): this target folder's libsquall.so installed into a scratch prefix, and the
//! check of a positive JSON figure. Owns the install only; must not run the benches.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Install this target folder's libsquall.so into a fresh prefix `squall-NAME-test-PID`.
pub fn prefix(name: &str) -> PathBuf {
    let lib = std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().nth(3).map(|t| t.join("release")))
        .filter(|d| d.join("libsquall.so").is_file())
        .expect("libsquall.so is not built in this target folder: run `cargo build --release -p squall-capi` first");
    let p = std::env::temp_dir().join(format!("squall-{name}-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let out = Command::new("sh")
        .arg(repo().join("crates/capi/install.sh"))
        .arg(&p)
        .arg(&lib)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

/// `row[key]`, which must be a positive finite number.
pub fn positive(row: &Value, key: &str) -> f64 {
    let v = row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {row}"));
    assert!(v > 0.0 && v.is_finite(), "{key} = {v} in {row}");
    v
}
