//! `squall doctor` end to end: the report on this machine (every check present, a fix under
//! every problem, `--json` parses), and the ssh check against hosts that answer, refuse and
//! hang (remote shells stood in by scripts, as in the launcher tests). The verdict of each
//! check on injected inputs is tested in `src/doctor/checks.rs`.
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

fn doctor(args: &[&str]) -> Output {
    let mut cmd = Command::new(SQUALL);
    cmd.arg("doctor").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("SQUALL_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().expect("run squall doctor")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn find<'a>(doc: &'a serde_json::Value, check: &str) -> &'a serde_json::Value {
    doc["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .find(|c| c["check"] == check)
        .unwrap_or_else(|| panic!("no {check} check in {doc}"))
}

fn script(name: &str, body: &str) -> String {
    let dir = std::env::temp_dir().join(format!("squall-doctor-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

#[test]
fn report_has_every_check_and_a_fix_under_each_problem() {
    let out = doctor(&["--json", "-n", "2"]);
    let doc = json(&out);
    for check in [
        "settings",
        "userfaultfd",
        "memfd",
        "vm.max_map_count",
        "address space",
        "memory",
        "ports",
        "C tools",
    ] {
        let c = find(&doc, check);
        let status = c["status"].as_str().expect("status");
        assert!(matches!(status, "ok" | "warn" | "fail"), "{c}");
        assert!(!c["detail"].as_str().unwrap_or("").is_empty(), "{c}");
        if status != "ok" {
            assert!(!c["fix"].as_str().unwrap_or("").is_empty(), "no fix: {c}");
        }
    }
    let failed = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .any(|c| c["status"] == "fail");
    assert_eq!(doc["ok"], !failed);
    assert_eq!(out.status.code(), Some(i32::from(failed)), "{doc}");
    // The text table has the same checks, and a `fix:` line under each problem.
    let text = doctor(&["-n", "2"]);
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.starts_with("CHECK"), "{t}");
    assert!(
        t.contains("userfaultfd") && t.contains("vm.max_map_count"),
        "{t}"
    );
    let problems = t
        .lines()
        .filter(|l| l.contains("  warn  ") || l.contains("  fail  "))
        .count();
    assert_eq!(t.matches("fix: ").count(), problems, "{t}");
}

#[test]
fn the_configured_heap_is_what_is_checked() {
    // 8 GiB reserved as a node would: fits here (the suite itself runs nodes).
    let mut cmd = Command::new(SQUALL);
    cmd.args(["doctor", "--json"]).env("SQUALL_HEAP_SIZE", "8G");
    let doc = json(&cmd.output().expect("run"));
    let c = find(&doc, "address space");
    assert!(
        c["detail"].as_str().unwrap_or("").contains("heap 8G"),
        "{c}"
    );
}

#[test]
fn ssh_check_per_host() {
    let good = script("rsh-ok", "#!/bin/sh\nshift\nexec sh -c \"$*\"\n");
    let refuse = script(
        "rsh-refuse",
        "#!/bin/sh\necho \"$1: Permission denied (publickey).\" >&2\nexit 255\n",
    );
    let hang = script("rsh-hang", "#!/bin/sh\nexec sleep 30\n");

    let out = doctor(&["--json", "--rsh", &good, "--hosts", "alpha,beta,alpha"]);
    let doc = json(&out);
    assert_eq!(find(&doc, "ssh alpha")["status"], "ok", "{doc}");
    assert_eq!(find(&doc, "ssh beta")["status"], "ok", "{doc}");
    let ssh_checks = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["check"].as_str().unwrap_or("").starts_with("ssh "))
        .count();
    assert_eq!(ssh_checks, 2, "each host once: {doc}");

    let out = doctor(&["--json", "--rsh", &refuse, "--hosts", "gamma"]);
    assert_eq!(out.status.code(), Some(1));
    let doc = json(&out);
    let c = find(&doc, "ssh gamma");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["fix"]
            .as_str()
            .unwrap_or("")
            .contains("ssh-copy-id gamma"),
        "{c}"
    );

    let started = std::time::Instant::now();
    let hosts = script("hosts", "delta\n");
    let out = doctor(&[
        "--json",
        "--rsh",
        &hang,
        "--hostfile",
        &hosts,
        "--ssh-timeout",
        "1",
    ]);
    assert!(
        started.elapsed().as_secs() < 20,
        "the probe did not time out"
    );
    let doc = json(&out);
    let c = find(&doc, "ssh delta");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap_or("")
            .contains("no answer within 1 s"),
        "{c}"
    );
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("squall-doctor-test-{}", std::process::id())),
    );
}
