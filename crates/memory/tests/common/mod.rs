//! Harness shared by the multi-process memory tests: a test re-runs its own binary as a child
//! process in a role (`SQUALL_MEMORY_ROLE`), and waits for it with a time limit.
#![allow(dead_code)]
use std::io::Read;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// The environment variable naming a child's role.
pub const ROLE: &str = "SQUALL_MEMORY_ROLE";

pub fn child(test: &str, role: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary path"));
    c.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    c
}

/// Wait for a child at most a minute (a hang is a failure, not a stuck CI job); its stdout and
/// stderr (if piped) are collected.
pub fn finish(mut c: Child, who: &str) -> Output {
    let take = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = take(c.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err = take(c.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{who} did not finish within 60 s (killed)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}
