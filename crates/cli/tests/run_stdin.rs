//! `squall run`'s stdin reaches rank 0 and only rank 0 (issue 20 item 5): real jobs of 2 and
//! 4 node processes (`sh` nodes printing the `cksum` of what they read) started locally,
//! through a fake remote shell and through mpirun, fed from a file, a pipe, a big input, a
//! pipe nobody reads, a closed stdin and a terminal.
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SQUALL: &str = env!("CARGO_BIN_EXE_squall");
/// Every node prints `R <cksum of its stdin>`.
const NODE: &str = "echo \"$SQUALL_RANK $(cksum)\"";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A deterministic input of `len` bytes with lines (SPLASH-style inputs are text).
fn input(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut i = 0u64;
    while v.len() < len {
        v.extend_from_slice(format!("{i} {}\n", i.wrapping_mul(2654435761) % 100_003).as_bytes());
        i += 1;
    }
    v.truncate(len);
    v
}

/// `cksum` of `data`, as the nodes print it (`CRC LENGTH`).
fn cksum(data: &[u8]) -> String {
    let mut child = Command::new("cksum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cksum");
    let mut w = child.stdin.take().expect("cksum stdin");
    let data = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&data));
    let out = child.wait_with_output().expect("cksum output");
    writer.join().expect("writer").expect("write to cksum");
    text(&out.stdout).trim().to_string()
}

/// Run `squall ARGS` with `data` written into a pipe on its stdin.
fn squall_piped(args: &[&str], data: &[u8]) -> Output {
    let mut child = Command::new(SQUALL)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run squall");
    let mut w = child.stdin.take().expect("stdin");
    let data = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&data));
    let out = child.wait_with_output().expect("squall output");
    writer
        .join()
        .expect("writer")
        .expect("write the job's input");
    out
}

/// Run `squall ARGS < file` (a file holding `data`).
fn squall_from_file(args: &[&str], data: &[u8], tag: &str) -> Output {
    let path = std::env::temp_dir().join(format!("squall-stdin-{tag}-{}.txt", std::process::id()));
    std::fs::write(&path, data).expect("write the input file");
    let file = std::fs::File::open(&path).expect("open the input file");
    let out = Command::new(SQUALL)
        .args(args)
        .stdin(Stdio::from(file))
        .output()
        .expect("run squall");
    let _ = std::fs::remove_file(&path);
    out
}

/// Rank 0 printed the checksum of `data`, every other rank the checksum of nothing.
fn check(out: &Output, nodes: usize, data: &[u8]) {
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "job failed: {so}\n{se}");
    let want0 = format!("[0] 0 {}", cksum(data));
    assert!(
        so.lines().any(|l| l == want0),
        "missing {want0:?} in:\n{so}\n{se}"
    );
    let empty = cksum(b"");
    for r in 1..nodes {
        let want = format!("[{r}] {r} {empty}");
        assert!(
            so.lines().any(|l| l == want),
            "rank {r} did not read EOF: {so}"
        );
    }
}

fn local(nodes: &str) -> Vec<&str> {
    vec!["run", "-n", nodes, "--timeout", "60", "sh", "-c", NODE]
}

#[test]
fn a_file_on_stdin_reaches_rank_0_of_2_and_4_nodes() {
    let data = input(100_000);
    for nodes in [2usize, 4] {
        let n = nodes.to_string();
        let out = squall_from_file(&local(&n), &data, "file");
        check(&out, nodes, &data);
    }
}

#[test]
fn a_pipe_on_stdin_reaches_rank_0_whole_even_when_big() {
    // 8 MB: far more than a pipe buffer, so rank 0 and the writer run side by side.
    let data = input(8 << 20);
    for nodes in [2usize, 4] {
        let n = nodes.to_string();
        let out = squall_piped(&local(&n), &data);
        check(&out, nodes, &data);
    }
}

#[test]
fn stdin_reaches_rank_0_through_a_remote_shell() {
    let data = input(3 << 20);
    let args = [
        "run",
        "-n",
        "3",
        "--hosts",
        "localhost",
        "--rsh",
        "./tests/fake-rsh.sh",
        "--timeout",
        "60",
        "sh",
        "-c",
        NODE,
    ];
    check(&squall_piped(&args, &data), 3, &data);
    check(&squall_from_file(&args, &data, "rsh"), 3, &data);
}

#[test]
fn stdin_reaches_rank_0_through_mpirun() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("mpirun not installed: skipping (Open MPI forwards stdin to rank 0)");
        return;
    }
    let data = input(2 << 20);
    // MPI gives the rank (no SQUALL_RANK under mpirun): Open MPI's or MPICH's variable.
    let node = "echo \"${OMPI_COMM_WORLD_RANK:-$PMI_RANK} $(cksum)\"";
    let args = [
        "run",
        "-n",
        "2",
        "--launcher",
        "mpirun",
        "--timeout",
        "60",
        "sh",
        "-c",
        node,
    ];
    check(&squall_piped(&args, &data), 2, &data);
    check(&squall_from_file(&args, &data, "mpirun"), 2, &data);
}

#[test]
fn a_program_that_never_reads_does_not_hang_on_an_open_pipe() {
    // The writer keeps the pipe open and never writes: the job still ends when its nodes do.
    let t0 = Instant::now();
    let mut child = Command::new(SQUALL)
        .args([
            "run",
            "-n",
            "2",
            "--timeout",
            "30",
            "sh",
            "-c",
            "echo done $SQUALL_RANK",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run squall");
    let held_open = child.stdin.take();
    let out = child.wait_with_output().expect("squall output");
    drop(held_open);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    assert!(
        so.contains("[0] done 0") && so.contains("[1] done 1"),
        "{so}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    // Rank 0 exits without reading 8 MB piped in: the writer sees a closed pipe, no hang.
    let data = input(8 << 20);
    let mut child = Command::new(SQUALL)
        .args(["run", "-n", "2", "--timeout", "30", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run squall");
    let mut w = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || w.write_all(&data));
    let out = child.wait_with_output().expect("squall output");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(writer.join().expect("writer").is_err(), "nobody read 8 MB?");
}

#[test]
fn a_closed_stdin_reads_as_eof() {
    // `sh -c 'exec <&-; squall ...'`: squall starts with fd 0 closed.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec <&-; exec {SQUALL} run -n 2 --timeout 30 sh -c '{}'",
            NODE.replace('\'', "'\\''")
        ))
        .output()
        .expect("run sh");
    check(&out, 2, b"");
}

#[test]
fn a_terminal_is_forwarded_to_rank_0() {
    // script(1) gives squall a pseudo-terminal as stdin and puts it in the foreground; what is
    // typed (here: piped into script) reaches rank 0 line by line, ^D ends it.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("script(1) not installed: skipping");
        return;
    }
    let cmd = format!(
        "{SQUALL} run -n 2 --timeout 30 sh -c 'read a; read b; echo \"$SQUALL_RANK got $a+$b\"'"
    );
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    let mut w = child.stdin.take().expect("stdin");
    w.write_all(b"first\nsecond\n").expect("type");
    let t0 = Instant::now();
    let out = child.wait_with_output().expect("script output");
    drop(w);
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    assert!(so.contains("[0] 0 got first+second"), "{so}");
    assert!(so.contains("[1] 1 got +"), "rank 1 must read EOF: {so}");
    assert!(t0.elapsed() < Duration::from_secs(20));
}
