//! Bad input everywhere (issue 25 item 8): every `squall` subcommand option and every
//! `SQUALL_*` variable a user sets, given an invalid value, an absurd size or a missing file,
//! ends `squall` with exit status 2 and a message naming the setting (and, for Squall's own
//! checks, a `fix:`), never a panic and never a started job. One table, run through the real
//! binary.
use std::io::Write;
use std::process::{Command, Stdio};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

/// One bad input: the arguments, extra environment, and the text the error must contain.
struct Case {
    args: Vec<String>,
    env: Vec<(String, String)>,
    names: String,
    /// Squall's own check (prints `fix:`); false for clap's parse errors (which print the
    /// accepted values or `--help`).
    ours: bool,
}

fn case(args: &[&str], names: &str) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        names: names.into(),
        ours: true,
    }
}

fn clap_case(args: &[&str], names: &str) -> Case {
    Case {
        ours: false,
        ..case(args, names)
    }
}

fn env_case(cmd: &[&str], var: &str, value: &str) -> Case {
    Case {
        env: vec![(var.to_string(), value.to_string())],
        ..case(cmd, var)
    }
}

fn temp_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("squall-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("temp file");
    f.write_all(text.as_bytes()).expect("write temp file");
    path.display().to_string()
}

fn cases() -> Vec<Case> {
    let slots = temp_file("hosts-slots", "nodeA slots=99999999999\n");
    let empty = temp_file("hosts-empty", "# nobody\n");
    let garbage = temp_file("hosts-garbage", "nodeA slots=two\n");
    let not_exec = temp_file("not-executable", "#!/bin/sh\n");
    let mut v = vec![
        // squall run: options
        case(&["run", "-n", "0", "true"], "--nodes"),
        case(&["run", "-n", "100000", "true"], "--nodes"),
        case(&["run", "-n", "18446744073709551615", "true"], "--nodes"),
        clap_case(&["run", "-n", "two", "true"], "--nodes"),
        clap_case(&["run", "-n", "99999999999999999999999", "true"], "--nodes"),
        clap_case(
            &["run", "-n", "2", "--transport", "pigeon", "true"],
            "--transport",
        ),
        clap_case(
            &["run", "-n", "2", "--launcher", "carrier", "true"],
            "--launcher",
        ),
        case(&["run", "-n", "2", "--timeout", "0", "true"], "--timeout"),
        case(&["run", "-n", "2", "--timeout", "-5", "true"], "--timeout"),
        case(&["run", "-n", "2", "--timeout", "nan", "true"], "--timeout"),
        case(&["run", "-n", "2", "--timeout", "inf", "true"], "--timeout"),
        case(
            &["run", "-n", "2", "--timeout", "1e300", "true"],
            "--timeout",
        ),
        clap_case(
            &["run", "-n", "2", "--timeout", "soon", "true"],
            "--timeout",
        ),
        case(
            &["run", "-n", "2", "--net-faults", "bogus", "true"],
            "--net-faults",
        ),
        case(
            &["run", "-n", "2", "--net-faults", "loss=0.1", "true"],
            "--net-faults",
        ),
        case(
            &[
                "run",
                "-n",
                "2",
                "--transport",
                "udp",
                "--net-faults",
                "loss=7",
                "true",
            ],
            "--net-faults",
        ),
        case(
            &["run", "-n", "2", "--hostfile", "/no/such/hostfile", "true"],
            "--hostfile",
        ),
        case(
            &["run", "-n", "2", "--hostfile", &slots, "true"],
            "--hostfile",
        ),
        case(
            &["run", "-n", "2", "--hostfile", &empty, "true"],
            "--hostfile",
        ),
        case(
            &["run", "-n", "2", "--hostfile", &garbage, "true"],
            "--hostfile",
        ),
        case(
            &["run", "-n", "2", "--launcher", "rsh", "true"],
            "--launcher",
        ),
        case(
            &[
                "run",
                "-n",
                "2",
                "--launcher",
                "local",
                "--hosts",
                "a",
                "true",
            ],
            "--launcher",
        ),
        case(
            &["run", "-n", "2", "--hosts", "a", "--rsh", " ", "true"],
            "--rsh",
        ),
        case(
            &[
                "run",
                "-n",
                "2",
                "--launcher",
                "mpirun",
                "--mpirun",
                "/no/mpirun",
                "true",
            ],
            "--mpirun",
        ),
        case(
            &["run", "-n", "2", "--mpirun-args", "-x", "true"],
            "--mpirun-args",
        ),
        case(
            &["run", "-n", "2", "--rendezvous-host", "h", "true"],
            "--rendezvous-host",
        ),
        case(&["run", "-n", "2", "./no/such/program"], "PROGRAM"),
        case(&["run", "-n", "2", "no-such-program-squall"], "PROGRAM"),
        case(&["run", "-n", "2", &not_exec], "PROGRAM"),
        clap_case(&["run", "-n", "2"], "PROGRAM"),
        case(&["run", "-n", "2", "--bogus", "true"], "--bogus"),
        // squall demo
        case(&["demo", "-n", "0"], "--nodes"),
        case(&["demo", "-n", "70000"], "--nodes"),
        clap_case(&["demo", "--transport", "smoke"], "--transport"),
        // squall doctor
        case(&["doctor", "-n", "0"], "--nodes"),
        case(&["doctor", "--threads", "0"], "--threads"),
        case(&["doctor", "--ssh-timeout", "0"], "--ssh-timeout"),
        case(&["doctor", "--ssh-timeout", "100000"], "--ssh-timeout"),
        case(&["doctor", "--rsh", ""], "--rsh"),
        case(&["doctor", "--hostfile", "/no/such/hostfile"], "--hostfile"),
        // squall env
        clap_case(&["env", "--colour"], "--colour"),
        // squall bench
        case(&["bench", "pingpong", "--iters", "0"], "--iters"),
        case(&["bench", "pingpong", "--reps", "0"], "--reps"),
        case(&["bench", "pingpong", "--sizes", "0"], "--sizes"),
        case(&["bench", "pingpong", "--sizes", "100000m"], "--sizes"),
        clap_case(&["bench", "pingpong", "--sizes", "lots"], "--sizes"),
        clap_case(
            &["bench", "pingpong", "--sizes", "99999999999999999m"],
            "--sizes",
        ),
        case(&["bench", "bandwidth", "--bytes", "100000m"], "--bytes"),
        case(&["bench", "bandwidth", "--reps", "0"], "--reps"),
        case(&["bench", "message", "-n", "1"], "--nodes"),
        case(&["bench", "message", "-n", "100000"], "--nodes"),
        case(&["bench", "message", "--messages", "0"], "--messages"),
        case(
            &["bench", "message", "--net-faults", "loss=2"],
            "--net-faults",
        ),
        case(&["bench", "fault", "--transport", "mpi"], "--transport"),
        case(&["bench", "lock", "--iters", "0"], "--iters"),
        case(&["bench", "barrier", "--nodes", "0"], "--nodes"),
        case(&["bench", "thread", "--reps", "0"], "--reps"),
        case(&["bench", "apps", "--nodes", "0"], "--nodes"),
        case(
            &["bench", "apps", "--threads-per-node", "0"],
            "--threads-per-node",
        ),
        case(&["bench", "apps", "--bin-dir", "/no/such/dir"], "--bin-dir"),
        case(
            &["bench", "apps", "--from-json", "/no/such.json"],
            "--from-json",
        ),
        clap_case(&["bench", "apps", "--size", "huge"], "--size"),
        case(&["bench", "apps", "--out", "/etc/hostname"], "--out"),
        case(
            &["bench", "apps", "--results-md", "/etc/hostname/results.md"],
            "--results-md",
        ),
    ];
    // Every variable a user sets, with a bad value or an absurd size, under `squall run`.
    let run = ["run", "-n", "2", "true"];
    for (var, value) in [
        ("SQUALL_HEAP_SIZE", "lots"),
        ("SQUALL_HEAP_SIZE", "100T"),
        ("SQUALL_HEAP_SIZE", "0"),
        ("SQUALL_HEAP_SIZE", "99999999999999999999T"),
        ("SQUALL_HEAP_BASE", "0x1001"),
        ("SQUALL_HEAP_BASE", "0x7fff_ffff_f000"),
        ("SQUALL_PROTOCOL", "mesi"),
        ("SQUALL_PLACEMENT", "node:x"),
        ("SQUALL_PLACEMENT", "node:7"),
        ("SQUALL_THREAD_PLACEMENT", "sideways"),
        ("SQUALL_NET_FAULTS", "loss=2"),
        ("SQUALL_BIND_ADDR", "localhost:80"),
        ("SQUALL_PEER_TIMEOUT_MS", "0"),
        ("SQUALL_PEER_TIMEOUT_MS", "18446744073709551615"),
        ("SQUALL_STATS", "maybe"),
        ("SQUALL_STATS_FILE", "/no/such/dir/stats.json"),
        ("SQUALL_FETCH_SPIN_US", "soon"),
        ("SQUALL_FETCH_SPIN_US", "18446744073709551615"),
        ("SQUALL_MPI_HEADERLESS", "2"),
        ("SQUALL_MPI_SHM", "maybe"),
        ("SQUALL_MPI_SHM_GROUPS", "0"),
        ("SQUALL_SERVICE_SLICE_US", "5"),
        ("SQUALL_BARRIER_EAGER", "sometimes"),
        ("SQUALL_LOCK_CACHE", "2"),
        ("SQUALL_BARRIER_FETCH", "99999999"),
        ("SQUALL_PUSH_UPDATES", "push"),
        ("SQUALL_HEAP", "100T"),
        ("SQUALL_PROTOCOLL", "sc"),
    ] {
        v.push(env_case(&run, var, value));
    }
    // The same checks guard `squall demo`, `squall bench` and `squall doctor` (which reports a
    // failed check, exit 1, rather than a usage error).
    v.push(env_case(&["demo", "-n", "2"], "SQUALL_PROTOCOL", "mesi"));
    v.push(env_case(&["bench", "lock"], "SQUALL_HEAP_SIZE", "100T"));
    v.push(env_case(
        &["bench", "apps"],
        "SQUALL_APPS_BIN",
        "/no/such/dir",
    ));
    v.push(env_case(
        &["bench", "apps"],
        "SQUALL_PLOT_FONT",
        "/no/such/font.ttf",
    ));
    v
}

#[test]
fn every_bad_input_names_its_setting_and_exits_2() {
    let mut failures = Vec::new();
    let all = cases();
    for c in &all {
        let mut cmd = Command::new(SQUALL);
        cmd.args(&c.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("SQUALL_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(c.env.iter().map(|(k, v)| (k, v)));
        let out = cmd.output().expect("run squall");
        let err = String::from_utf8_lossy(&out.stderr);
        let so = String::from_utf8_lossy(&out.stdout);
        let what = format!("{:?} {:?}", c.env, c.args);
        if out.status.code() != Some(2) {
            failures.push(format!(
                "{what}: exit {:?}, stderr {err}",
                out.status.code()
            ));
        } else if !err.contains(&c.names) {
            failures.push(format!(
                "{what}: the error does not name {}: {err}",
                c.names
            ));
        } else if c.ours && !err.contains("fix:") {
            failures.push(format!("{what}: no fix in: {err}"));
        } else if !(c.ours || err.contains("--help") || err.contains("possible values")) {
            failures.push(format!("{what}: no hint in: {err}"));
        } else if err.contains("panicked") || so.contains("[0]") {
            failures.push(format!("{what}: panicked or started a job: {so}{err}"));
        }
    }
    println!("{} bad inputs checked", all.len());
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("squall-bad-input-{}", std::process::id())),
    );
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs mishandled:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn doctor_reports_a_bad_setting_as_a_failed_check() {
    let out = Command::new(SQUALL)
        .args(["doctor", "--json"])
        .env("SQUALL_HEAP_SIZE", "100T")
        .output()
        .expect("run squall doctor");
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("doctor --json prints one JSON object");
    let failed = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .any(|c| c["check"] == "setting SQUALL_HEAP_SIZE" && c["status"] == "fail");
    assert!(failed, "{doc}");
    assert_eq!(doc["ok"], false);
}
