//! The README and docs/env.md stay in step with the code: docs/env.md holds the exact tables
//! `squall env --markdown` prints (the environment variables and the `squall run` options), the
//! README the variables' table, and the quick start names scripts that exist.
use std::path::Path;
use std::process::Command;

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn docs_hold_the_current_environment_table() {
    let out = Command::new(SQUALL)
        .args(["env", "--markdown"])
        .output()
        .expect("squall env");
    let both = String::from_utf8_lossy(&out.stdout).into_owned();
    let (vars, options) = both
        .split_once("\n\n")
        .expect("squall env --markdown prints two tables");
    assert!(vars.lines().count() > 2 && options.lines().count() > 2);
    for (doc, table) in [("README.md", vars), ("docs/env.md", both.as_str())] {
        let text = repo_file(doc);
        for line in table.lines().filter(|l| !l.is_empty()) {
            assert!(
                text.lines().any(|l| l == line),
                "{doc} lacks {line:?}; regenerate its table with `squall env --markdown`"
            );
        }
    }
}

#[test]
fn quick_start_scripts_exist_and_are_executable() {
    use std::os::unix::fs::PermissionsExt;
    let readme = repo_file("README.md");
    for script in [".ci/setup.sh", ".ci/test.sh", ".ci/run"] {
        assert!(readme.contains(script), "README does not mention {script}");
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(script);
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{script}: {e}"))
            .permissions()
            .mode();
        assert!(mode & 0o111 != 0, "{script} is not executable");
    }
}
