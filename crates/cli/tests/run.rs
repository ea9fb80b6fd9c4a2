//! `squall run` end to end: real node processes (this binary's `__node` programs, or `sh`)
//! started by the launcher, over tcp and udp, locally and through a fake remote shell; exit
//! status propagation, a node killed mid-run, timeouts and signals to the launcher.
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");

fn squall(args: &[&str]) -> Output {
    Command::new(SQUALL)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run squall")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `squall run -n n <opts> squall __node selftest`: asserts the job succeeds and every node
/// reports its selftest passed; returns the job's output.
fn selftest_with(n: usize, opts: &[&str]) -> String {
    let nodes = n.to_string();
    let mut args = vec!["run", "-n", &nodes];
    args.extend_from_slice(opts);
    args.extend_from_slice(&[SQUALL, "__node", "selftest"]);
    let out = squall(&args);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "selftest {opts:?} failed: {so}\n{se}");
    for r in 0..n {
        let line = format!("[{r}] selftest ok: node {r} of {n}");
        assert!(so.contains(&line), "missing {line:?} in:\n{so}\n{se}");
    }
    so
}

fn selftest(nodes: usize, transport: &str) {
    selftest_with(nodes, &["--transport", transport, "--timeout", "60"]);
}

#[test]
fn selftest_2_nodes_tcp() {
    selftest(2, "tcp");
}

#[test]
fn selftest_4_nodes_tcp() {
    selftest(4, "tcp");
}

/// `--transport mpi`: one mpirun starts the nodes (feature `mpi`; Open MPI installed).
#[cfg(feature = "mpi")]
#[test]
fn selftest_2_nodes_mpi() {
    selftest(2, "mpi");
}

/// `--launcher mpirun` with extra mpirun arguments passed through.
#[cfg(feature = "mpi")]
#[test]
fn selftest_4_nodes_mpirun_with_args() {
    selftest_with(
        4,
        &[
            "--launcher",
            "mpirun",
            "--mpirun-args",
            "--mca btl_vader_single_copy_mechanism none",
            "--timeout",
            "120",
        ],
    );
}

#[test]
fn selftest_2_nodes_udp() {
    selftest(2, "udp");
}

#[test]
fn selftest_4_nodes_udp() {
    selftest(4, "udp");
}

#[test]
fn selftest_over_lossy_udp_with_injected_faults() {
    selftest_with(
        3,
        &[
            "--transport",
            "udp",
            "--net-faults",
            "loss=0.05,dup=0.02,reorder=0.05,seed=7",
            "--timeout",
            "60",
        ],
    );
}

#[test]
fn selftest_through_a_remote_shell() {
    let so = selftest_with(
        2,
        &[
            "--hosts",
            "localhost,localhost",
            "--rsh",
            "./tests/fake-rsh.sh",
            "--timeout",
            "60",
        ],
    );
    // Authentication is on by default for a remote-shell job.
    assert!(authenticated(&so, 2).iter().all(|n| *n > 0), "{so}");
}

/// The packets each node reports it authenticated, from selftest's closing line.
fn authenticated(so: &str, n: usize) -> Vec<u64> {
    (0..n)
        .map(|r| {
            let at = format!("[{r}] selftest ok:");
            so.lines()
                .find(|l| l.starts_with(&at))
                .and_then(|l| l.rsplit("; ").next())
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no count of node {r} in:\n{so}"))
        })
        .collect()
}

#[test]
fn auth_on_request_locally_over_tcp_and_udp() {
    for t in ["tcp", "udp"] {
        let run = |auth: &str| {
            authenticated(
                &selftest_with(2, &[auth, "--transport", t, "--timeout", "60"]),
                2,
            )
        };
        assert!(run("--auth").iter().all(|n| *n > 0), "{t}: --auth");
        assert!(run("--encrypt").iter().all(|n| *n > 0), "{t}: --encrypt");
        assert!(run("--no-auth").iter().all(|n| *n == 0), "{t}: --no-auth");
    }
}

#[test]
fn through_a_remote_shell_the_key_comes_on_stdin_before_the_job_input() {
    // The program sees the key in its environment, and rank 0 still gets the job's input.
    let mut child = Command::new(SQUALL)
        .args([
            "run",
            "-n",
            "2",
            "--hosts",
            "localhost",
            "--rsh",
            "./tests/fake-rsh.sh",
            "sh",
            "-c",
            "echo \"$SQUALL_AUTH ${#SQUALL_AUTH_KEY} $(cat)\"",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("squall");
    {
        use std::io::Write;
        let mut w = child.stdin.take().expect("stdin");
        w.write_all(b"job input").expect("write");
    }
    let out = child.wait_with_output().expect("output");
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}");
    assert!(so.contains("[0] on 64 job input"), "{so}");
    assert!(
        so.contains("[1] on 64 \n") || so.contains("[1] on 64\n"),
        "{so}"
    );
    let out = squall(&[
        "run",
        "-n",
        "1",
        "--no-auth",
        "--hosts",
        "localhost",
        "--rsh",
        "./tests/fake-rsh.sh",
        "sh",
        "-c",
        "echo \"$SQUALL_AUTH ${#SQUALL_AUTH_KEY}\"",
    ]);
    assert!(
        text(&out.stdout).contains("[0] off 0"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn remote_shell_gets_the_environment_on_its_command_line() {
    let out = squall(&[
        "run",
        "-n",
        "3",
        "--hosts",
        "localhost",
        "--rsh",
        "./tests/fake-rsh.sh",
        // loss needs a lossy transport (squall run refuses it over tcp, as the nodes would).
        "--transport",
        "udp",
        "--net-faults",
        "loss=0.1",
        "sh",
        "-c",
        "echo \"$SQUALL_RANK/$SQUALL_SIZE $SQUALL_BIND_ADDR $SQUALL_NET_FAULTS $SQUALL_RENDEZVOUS\"",
    ]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    for r in 0..3 {
        let want = format!("[{r}] {r}/3 0.0.0.0 loss=0.1 127.0.0.1:");
        assert!(so.contains(&want), "missing {want:?} in:\n{so}");
    }
}

#[test]
fn hostfile_slots_place_ranks_in_order() {
    let dir = std::env::temp_dir().join(format!("squall-hostfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("hosts");
    std::fs::write(&file, "# two slots here\nlocalhost slots=2\n127.0.0.1\n").expect("write");
    let out = squall(&[
        "run",
        "-n",
        "3",
        "--hostfile",
        file.to_str().expect("utf-8 path"),
        "--rsh",
        "./tests/fake-rsh.sh",
        "sh",
        "-c",
        "echo rank $SQUALL_RANK",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    for r in 0..3 {
        assert!(so.contains(&format!("[{r}] rank {r}")), "{so}");
    }
}

#[test]
fn every_node_gets_the_launcher_environment() {
    let out = squall(&[
        "run",
        "-n",
        "3",
        "--transport",
        "udp",
        "--stats",
        "--no-prefix",
        "sh",
        "-c",
        "echo \"$SQUALL_RANK $SQUALL_SIZE $SQUALL_TRANSPORT $SQUALL_STATS $SQUALL_JOB_ID $SQUALL_RENDEZVOUS\"",
    ]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    let mut lines: Vec<&str> = so.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{so}");
    let job = lines[0].split(' ').nth(4).expect("job id");
    assert_eq!(job.len(), 16, "job id {job:?} is not 16 hex digits");
    assert!(u64::from_str_radix(job, 16).is_ok());
    for (r, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f[..4], [r.to_string().as_str(), "3", "udp", "1"], "{l}");
        assert_eq!(f[4], job, "nodes disagree on the job id");
        assert!(f[5].starts_with("127.0.0.1:"), "{l}");
    }
}

#[test]
fn a_failing_node_is_named_and_its_status_propagates() {
    let t0 = Instant::now();
    let out = squall(&[
        "run",
        "-n",
        "3",
        "sh",
        "-c",
        "if [ \"$SQUALL_RANK\" = 1 ]; then exit 7; fi; exec sleep 30",
    ]);
    let se = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{se}");
    assert!(se.contains("node 1 (pid"), "{se}");
    assert!(se.contains("exited with status 7"), "{se}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the other nodes were not ended promptly ({:?})",
        t0.elapsed()
    );
}

/// Start `squall run ARGS` with stdout piped; read lines `[r] pid N` until `n` are seen.
fn start_with_pids(args: &[&str], n: usize) -> (std::process::Child, Vec<u32>, Instant) {
    let mut child = Command::new(SQUALL)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn squall");
    let stdout = child.stdout.take().expect("stdout");
    let mut pids = vec![0u32; n];
    let mut seen = 0;
    let mut lines = BufReader::new(stdout).lines();
    while seen < n {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => break,
        };
        if let Some((rank, pid)) = line.strip_prefix('[').and_then(|l| l.split_once("] pid ")) {
            let rank: usize = rank.parse().expect("rank");
            pids[rank] = pid.trim().parse().expect("pid");
            seen += 1;
        }
    }
    assert_eq!(seen, n, "not every node printed its pid");
    // Keep draining stdout so nodes never block on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, pids, Instant::now())
}

/// Is `pid` a live process (zombies waiting for a reaper count as dead)? Polls for up to 1 s,
/// since a signalled process takes a moment to go.
fn alive(pid: u32) -> bool {
    let t0 = Instant::now();
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.chars().next())
            });
        let live = matches!(state, Some(c) if c != 'Z' && c != 'X');
        if !live || t0.elapsed() > Duration::from_secs(1) {
            return live;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("squall run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_node_killed_mid_run_ends_the_job_within_5_seconds() {
    let (mut child, pids, _) = start_with_pids(
        &[
            "run",
            "-n",
            "3",
            "--timeout",
            "60",
            SQUALL,
            "__node",
            "hold",
            "--secs",
            "30",
        ],
        3,
    );
    let killed_at = Instant::now();
    let st = Command::new("kill")
        .args(["-KILL", &pids[1].to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let status = wait_with_deadline(&mut child, Duration::from_secs(5));
    let elapsed = killed_at.elapsed();
    let mut se = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut se);
    }
    assert!(!status.success(), "{se}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert!(
        se.contains(&format!(
            "node 1 (pid {}) was killed by signal SIGKILL",
            pids[1]
        )),
        "{se}"
    );
    for pid in pids {
        assert!(!alive(pid), "node pid {pid} survived the job");
    }
}

/// `squall run` of 3 `hold` nodes with a short peer timeout (and `extra` options), pids known.
fn held_job(extra: &[&str]) -> (std::process::Child, Vec<u32>) {
    let mut args = vec!["run", "-n", "3", "--timeout", "60"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[SQUALL, "__node", "hold", "--secs", "30"]);
    let mut child = Command::new(SQUALL)
        .args(&args)
        .env("SQUALL_PEER_TIMEOUT_MS", "500")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn squall");
    let stdout = child.stdout.take().expect("stdout");
    let mut pids = vec![0u32; 3];
    let mut lines = BufReader::new(stdout).lines();
    for _ in 0..3 {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some((rank, pid)) = line.strip_prefix('[').and_then(|l| l.split_once("] pid ")) {
            pids[rank.parse::<usize>().expect("rank")] = pid.trim().parse().expect("pid");
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, pids)
}

fn stderr_of(child: &mut std::process::Child) -> String {
    let mut se = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut se);
    }
    se
}

fn a_stopped_node_ends_the_job_after_the_peer_timeout(transport: &str) {
    let (mut child, pids) = held_job(&["--transport", transport]);
    assert!(
        pids.iter().all(|&p| p != 0),
        "not every node printed its pid"
    );
    let st = Command::new("kill")
        .args(["-STOP", &pids[1].to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    // Generous: only a hang fails (the peer timeout is 0.5 s).
    let status = wait_with_deadline(&mut child, Duration::from_secs(20));
    let se = stderr_of(&mut child);
    assert!(!status.success(), "{se}");
    assert!(se.contains("lost contact with node 1 ("), "{se}");
    for pid in pids {
        assert!(!alive(pid), "node pid {pid} survived the job");
    }
}

#[test]
fn a_stopped_node_ends_the_job_over_tcp() {
    a_stopped_node_ends_the_job_after_the_peer_timeout("tcp");
}

#[test]
fn a_stopped_node_ends_the_job_over_udp() {
    a_stopped_node_ends_the_job_after_the_peer_timeout("udp");
}

fn a_partition_ends_the_job_naming_the_cut_nodes(transport: &str) {
    let (mut child, pids) = held_job(&[
        "--transport",
        transport,
        "--net-faults",
        "partition=0-2@100ms",
    ]);
    let status = wait_with_deadline(&mut child, Duration::from_secs(20));
    let se = stderr_of(&mut child);
    assert!(!status.success(), "{se}");
    assert!(
        se.contains("lost contact with node 0 (") || se.contains("lost contact with node 2 ("),
        "{se}"
    );
    for pid in pids {
        assert!(!alive(pid), "node pid {pid} survived the job");
    }
}

#[test]
fn a_partition_ends_the_job_over_tcp() {
    a_partition_ends_the_job_naming_the_cut_nodes("tcp");
}

#[test]
fn a_partition_ends_the_job_over_udp() {
    a_partition_ends_the_job_naming_the_cut_nodes("udp");
}

fn signal_to_the_launcher_ends_every_node(sig: &str, signo: i32) {
    let (mut child, pids, _) = start_with_pids(
        &[
            "run",
            "-n",
            "2",
            "sh",
            "-c",
            "echo \"pid $$\"; exec sleep 30",
        ],
        2,
    );
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let status = wait_with_deadline(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(128 + signo));
    for pid in pids {
        assert!(
            !alive(pid),
            "node pid {pid} survived the launcher's SIG{sig}"
        );
    }
}

#[test]
fn sigterm_to_the_launcher_ends_every_node() {
    signal_to_the_launcher_ends_every_node("TERM", 15);
}

#[test]
fn ctrl_c_to_the_launcher_ends_every_node() {
    signal_to_the_launcher_ends_every_node("INT", 2);
}

#[test]
fn a_node_ignoring_sigterm_is_killed_after_the_grace_period() {
    let t0 = Instant::now();
    let out = squall(&[
        "run",
        "-n",
        "2",
        "sh",
        "-c",
        "if [ \"$SQUALL_RANK\" = 0 ]; then sleep 0.3; exit 5; fi; trap '' TERM; while :; do sleep 0.1; done",
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "SIGKILL came early: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn background_children_of_a_failed_job_are_cleaned_up() {
    let (mut child, pids, _) = start_with_pids(
        &[
            "run",
            "-n",
            "2",
            "sh",
            "-c",
            "sleep 30 & echo \"pid $!\"; if [ \"$SQUALL_RANK\" = 0 ]; then sleep 0.5; exit 4; fi; wait",
        ],
        2,
    );
    let status = wait_with_deadline(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(4));
    for pid in pids {
        assert!(
            !alive(pid),
            "background child {pid} of a node survived the job"
        );
    }
}

#[test]
fn timeout_ends_the_job_with_124() {
    let t0 = Instant::now();
    let out = squall(&["run", "-n", "2", "--timeout", "0.5", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(text(&out.stderr).contains("timed out"));
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn output_is_prefixed_unless_asked_not_to() {
    let out = squall(&["run", "-n", "2", "sh", "-c", "echo hi; echo err >&2"]);
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success());
    assert!(so.contains("[0] hi") && so.contains("[1] hi"), "{so}");
    assert!(se.contains("[0] err") && se.contains("[1] err"), "{se}");
    let out = squall(&["run", "-n", "2", "--no-prefix", "echo", "hi"]);
    assert_eq!(text(&out.stdout), "hi\nhi\n");
}

#[test]
fn helpful_errors_for_bad_invocations() {
    let out = squall(&["run", "-n", "2", "no-such-program-xyz"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("program not found: no-such-program-xyz"),
        "{}",
        text(&out.stderr)
    );
    let out = squall(&["run", "-n", "0", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("at least 1 node"));
    let out = squall(&["run", "-n", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let out = squall(&["run", "-n", "1", "--launcher", "rsh", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--hosts"));
}

#[test]
fn help_and_env_list_every_variable() {
    let help = text(&squall(&["run", "--help"]).stdout);
    let env = text(&squall(&["env"]).stdout);
    for v in [
        "SQUALL_RANK",
        "SQUALL_SIZE",
        "SQUALL_RENDEZVOUS",
        "SQUALL_JOB_ID",
        "SQUALL_TRANSPORT",
        "SQUALL_NET_FAULTS",
        "SQUALL_PEER_TIMEOUT_MS",
    ] {
        assert!(help.contains(v), "--help lacks {v}");
        assert!(env.contains(v), "squall env lacks {v}");
    }
    assert!(help.contains("Examples:"));
}

#[test]
fn demo_runs_on_4_nodes() {
    // The default demo: heat diffusion in shared memory, checked against the sequential run.
    let out = squall(&["demo"]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    assert!(so.contains("steps on 4 nodes"), "{so}");
    assert!(so.contains(": match"), "{so}");
    for r in 0..4 {
        assert!(so.contains(&format!("[{r}] rows ")), "{so}");
    }
    // The backbone demo: a token around the ring, then a message flood.
    let out = squall(&["demo", "--backbone"]);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    assert!(so.contains("[0] demo ok: 4 nodes"), "{so}");
    assert!(so.contains("rank sum 18 correct"), "{so}");
    for r in 0..4 {
        assert!(
            so.contains(&format!("[{r}] node {r}: received 20000 messages")),
            "{so}"
        );
    }
}
