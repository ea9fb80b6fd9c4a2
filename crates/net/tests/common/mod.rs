//! Test harness: runs N copies of the current test binary as the nodes of one job, each entering
//! the `child_entry` test with `SQUALL_TEST_ROLE` set.
#![allow(dead_code)]
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A rendezvous port the nodes' own `bind(0)` sockets cannot take (the launcher's choice).
pub fn free_port() -> u16 {
    squall_launch::local::free_port(std::net::Ipv4Addr::LOCALHOST).expect("a free port")
}

pub struct Job {
    pub children: Vec<Child>,
}

pub fn spawn(n: u16, transport: &str, role: &str, extra: &[(&str, &str)]) -> Job {
    let ranks: Vec<u16> = (0..n).collect();
    spawn_ranks(n, &ranks, free_port(), transport, role, extra)
}

/// Starts only `ranks` of an `n`-node job whose rendezvous is 127.0.0.1:`port` (a test can
/// then act between the ranks' starts).
pub fn spawn_ranks(
    n: u16,
    ranks: &[u16],
    port: u16,
    transport: &str,
    role: &str,
    extra: &[(&str, &str)],
) -> Job {
    let exe = std::env::current_exe().expect("current exe");
    let children = ranks
        .iter()
        .map(|&r| {
            let mut c = Command::new(&exe);
            c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
                .env("SQUALL_RANK", r.to_string())
                .env("SQUALL_SIZE", n.to_string())
                .env("SQUALL_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("SQUALL_TRANSPORT", transport)
                .env("SQUALL_PEER_TIMEOUT_MS", "10000")
                .env("SQUALL_TEST_ROLE", role)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in extra {
                c.env(k, v);
            }
            c.spawn().expect("spawn a node")
        })
        .collect();
    Job { children }
}

/// Runs N copies of the current test binary under `mpirun -n N` (one child: mpirun), with
/// `SQUALL_TRANSPORT=mpi` and no squall rank variables: the nodes learn rank and size from MPI.
pub fn spawn_mpirun(n: u16, role: &str, extra: &[(&str, &str)]) -> Job {
    let exe = std::env::current_exe().expect("current exe");
    let mut c = Command::new("mpirun");
    c.args(["-n", &n.to_string(), "--oversubscribe"])
        .args(["--mca", "btl_vader_single_copy_mechanism", "none"])
        .arg(&exe)
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env_remove("SQUALL_RANK")
        .env_remove("SQUALL_SIZE")
        .env_remove("SQUALL_RENDEZVOUS")
        .env("SQUALL_TRANSPORT", "mpi")
        .env("SQUALL_PEER_TIMEOUT_MS", "10000")
        .env("SQUALL_TEST_ROLE", role)
        // Containers and CI run as root; Open MPI refuses that without these.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        c.env(k, v);
    }
    Job {
        children: vec![c.spawn().expect("spawn mpirun (is Open MPI installed?)")],
    }
}

pub struct Outcome {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

fn read_all(r: Option<impl std::io::Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

impl Job {
    /// Waits for every node (killing all at `limit`), returning each node's outcome.
    pub fn wait(mut self, limit: Duration) -> Vec<Outcome> {
        let start = Instant::now();
        // Drain pipes on threads so a chatty node never blocks.
        let readers: Vec<_> = self
            .children
            .iter_mut()
            .map(|c| {
                let out = c.stdout.take();
                let err = c.stderr.take();
                (
                    std::thread::spawn(move || read_all(out)),
                    std::thread::spawn(move || read_all(err)),
                )
            })
            .collect();
        let mut done: Vec<Option<(ExitStatus, Duration)>> = vec![None; self.children.len()];
        while done.iter().any(Option::is_none) && start.elapsed() < limit {
            for (i, c) in self.children.iter_mut().enumerate() {
                if done[i].is_none() {
                    if let Ok(Some(s)) = c.try_wait() {
                        done[i] = Some((s, start.elapsed()));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for (i, c) in self.children.iter_mut().enumerate() {
            if done[i].is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        readers
            .into_iter()
            .zip(done)
            .map(|((o, e), d)| Outcome {
                status: d.map(|x| x.0),
                stdout: o.join().unwrap_or_default(),
                stderr: e.join().unwrap_or_default(),
                elapsed: d.map_or(limit, |x| x.1),
            })
            .collect()
    }
}

/// Asserts every node exited 0, showing their output otherwise.
pub fn assert_success(what: &str, outs: &[Outcome]) {
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.is_some_and(|s| s.success()),
            "{what}: node {r} ended with {:?}\n--- stdout\n{}\n--- stderr\n{}",
            o.status,
            o.stdout,
            o.stderr
        );
    }
}

/// Reads lines from a child's stdout until one starts with `prefix`.
pub fn read_line_with(child: &mut Child, prefix: &str) -> Option<String> {
    let out = child.stdout.as_mut()?;
    let mut r = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(at) = line.find(prefix) {
            return Some(line[at + prefix.len()..].trim().to_string());
        }
    }
}
