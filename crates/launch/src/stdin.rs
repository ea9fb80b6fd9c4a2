//! The job's standard input: what rank 0 reads (as under `mpirun`); every other rank reads
//! EOF from /dev/null. Owns choosing rank 0's stdin and the feeder thread that copies the
//! launcher's terminal, or bytes given by a library caller, into rank 0's pipe; must not spawn
//! or supervise nodes (that is [`crate::job`]).
//!
//! How each [`JobInput`] reaches rank 0 (or, for the remote-shell and mpirun launchers, the
//! `ssh`/`mpirun` process that starts rank 0, which forward their own stdin to it):
//!
//! * a file, a pipe or a socket on the launcher's stdin is handed to rank 0 as is (no copy,
//!   nothing to stop: whatever rank 0 leaves unread stays in it);
//! * a terminal is read by a feeder thread and copied into a pipe: a node leads its own
//!   process group, so reading the terminal itself would stop it with SIGTTIN. The feeder reads
//!   only while the launcher is the terminal's foreground group (a `squall run ... &` in the
//!   background never steals the shell's input, and is never stopped by SIGTTIN);
//! * a closed stdin gives rank 0 /dev/null;
//! * bytes ([`JobInput::Bytes`]) are written into a pipe by a feeder thread.
//!
//! A feeder polls with a short timeout and never blocks on rank 0: it ends at EOF of its
//! source, when rank 0 closes its stdin or exits (the write fails), or when the job ends.
//!
//! A prefix (the job key line, for remote shells that read it first) makes every input go
//! through a feeder: the prefix is written, then the input is copied (a file, or the
//! launcher's own stdin when it is a pipe or a file, is then read by the feeder too).
use crate::error::LaunchError;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags};
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::process::{ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How long a feeder waits in one poll before looking at the stop flag again (milliseconds).
const POLL_MS: u16 = 100;
/// Bytes a feeder moves per read from the terminal.
const CHUNK: usize = 64 * 1024;

/// What rank 0 of a job reads on its standard input. The other ranks always read EOF.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum JobInput {
    /// /dev/null for rank 0 too (the library default).
    #[default]
    Null,
    /// The launcher's own stdin (what `squall run` uses): `squall run -n 4 ./prog < input`.
    Inherit,
    /// The contents of this file.
    File(PathBuf),
    /// These bytes, then EOF.
    Bytes(Arc<[u8]>),
}

/// Where a feeder's bytes come from.
enum Source {
    /// The launcher's stdin, a terminal.
    Terminal,
    /// A caller's bytes.
    Bytes(Arc<[u8]>),
    /// A file, or the launcher's stdin when it is a pipe or a file.
    Fd(std::fs::File),
}

/// Rank 0's stdin before its process is spawned.
pub(crate) struct Rank0Input {
    source: Option<Source>,
    /// Written before the source (the job key line).
    prefix: Option<Arc<[u8]>>,
}

impl Rank0Input {
    /// Decide rank 0's stdin for `input`; the returned `Stdio` goes to rank 0's command.
    #[cfg(test)]
    pub(crate) fn prepare(input: &JobInput) -> Result<(Stdio, Rank0Input), LaunchError> {
        Self::prepare_after(input, None)
    }

    /// Like [`Rank0Input::prepare`], with `prefix` written before the input.
    pub(crate) fn prepare_after(
        input: &JobInput,
        prefix: Option<Arc<[u8]>>,
    ) -> Result<(Stdio, Rank0Input), LaunchError> {
        if let Some(prefix) = prefix {
            let source = match input {
                JobInput::Null => None,
                JobInput::File(path) => {
                    Some(Source::Fd(std::fs::File::open(path).map_err(|source| {
                        LaunchError::Input {
                            path: path.clone(),
                            source,
                        }
                    })?))
                }
                JobInput::Bytes(b) => Some(Source::Bytes(Arc::clone(b))),
                JobInput::Inherit => {
                    let stdin = std::io::stdin();
                    if nix::sys::stat::fstat(stdin.as_raw_fd()).is_err() {
                        None
                    } else if stdin.is_terminal() {
                        Some(Source::Terminal)
                    } else {
                        stdin
                            .as_fd()
                            .try_clone_to_owned()
                            .ok()
                            .map(|fd| Source::Fd(std::fs::File::from(fd)))
                    }
                }
            };
            let input = Rank0Input {
                source,
                prefix: Some(prefix),
            };
            return Ok((Stdio::piped(), input));
        }
        let none = Rank0Input {
            source: None,
            prefix: None,
        };
        Ok(match input {
            JobInput::Null => (Stdio::null(), none),
            JobInput::File(path) => {
                let file = std::fs::File::open(path).map_err(|source| LaunchError::Input {
                    path: path.clone(),
                    source,
                })?;
                (Stdio::from(file), none)
            }
            JobInput::Bytes(b) => (
                Stdio::piped(),
                Rank0Input {
                    source: Some(Source::Bytes(Arc::clone(b))),
                    prefix: None,
                },
            ),
            JobInput::Inherit => {
                let stdin = std::io::stdin();
                if nix::sys::stat::fstat(stdin.as_raw_fd()).is_err() {
                    // fd 0 is closed: rank 0 reads EOF.
                    (Stdio::null(), none)
                } else if stdin.is_terminal() {
                    (
                        Stdio::piped(),
                        Rank0Input {
                            source: Some(Source::Terminal),
                            prefix: None,
                        },
                    )
                } else {
                    (Stdio::inherit(), none)
                }
            }
        })
    }

    /// Start the feeder for rank 0's pipe, if this input needs one. Set `stop` to end it.
    pub(crate) fn start(
        self,
        pipe: Option<ChildStdin>,
        stop: &Arc<AtomicBool>,
    ) -> Option<JoinHandle<()>> {
        if self.source.is_none() && self.prefix.is_none() {
            return None;
        }
        let (source, prefix, pipe) = (self.source, self.prefix, pipe?);
        let stop = Arc::clone(stop);
        std::thread::Builder::new()
            .name("squall-stdin".into())
            .spawn(move || feed(prefix, source, pipe, &stop))
            .ok()
    }
}

/// Write `prefix`, then copy `source` into `pipe` until EOF, a failed write (rank 0 closed its
/// stdin or exited) or `stop`; dropping `pipe` at the end gives rank 0 its EOF.
fn feed(
    prefix: Option<Arc<[u8]>>,
    source: Option<Source>,
    mut pipe: ChildStdin,
    stop: &AtomicBool,
) {
    // A non-blocking pipe: a rank 0 that never reads must not hold the feeder forever.
    let nonblocking = fcntl(pipe.as_raw_fd(), FcntlArg::F_GETFL)
        .map(OFlag::from_bits_truncate)
        .and_then(|fl| fcntl(pipe.as_raw_fd(), FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)));
    if nonblocking.is_err() {
        return;
    }
    if let Some(p) = prefix {
        if !write_all(&mut pipe, &p, stop) {
            return;
        }
    }
    let Some(source) = source else {
        return;
    };
    match source {
        Source::Fd(file) => {
            let mut buf = vec![0u8; CHUNK];
            while !stop.load(Ordering::Relaxed) {
                match read_fd(file.as_fd(), &mut buf) {
                    Read::Data(n) => {
                        if !write_all(&mut pipe, &buf[..n], stop) {
                            break;
                        }
                    }
                    Read::Nothing => {}
                    Read::End => break,
                }
            }
        }
        Source::Bytes(bytes) => {
            let _ = write_all(&mut pipe, &bytes, stop);
        }
        Source::Terminal => {
            let mut buf = vec![0u8; CHUNK];
            while !stop.load(Ordering::Relaxed) {
                match read_terminal(&mut buf) {
                    Read::Data(n) => {
                        if !write_all(&mut pipe, &buf[..n], stop) {
                            break;
                        }
                    }
                    Read::Nothing => {}
                    Read::End => break,
                }
            }
        }
    }
}

enum Read {
    Data(usize),
    /// Nothing yet (timeout, interrupted, or the launcher is in the background).
    Nothing,
    /// EOF (Ctrl-D) or an error.
    End,
}

/// One bounded look at the terminal on fd 0.
fn read_terminal(buf: &mut [u8]) -> Read {
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    // Only the foreground group may read the terminal (others are stopped by SIGTTIN).
    if nix::unistd::tcgetpgrp(fd).ok() != Some(nix::unistd::getpgrp()) {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(POLL_MS)));
        return Read::Nothing;
    }
    read_fd(fd, buf)
}

/// One bounded look at a terminal, file or pipe (never blocks longer than a poll interval).
fn read_fd(fd: std::os::fd::BorrowedFd<'_>, buf: &mut [u8]) -> Read {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, POLL_MS) {
        Ok(0) => return Read::Nothing,
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Read::Nothing,
        Err(_) => return Read::End,
    }
    match nix::unistd::read(fd.as_raw_fd(), buf) {
        Ok(0) => Read::End,
        Ok(n) => Read::Data(n),
        Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => Read::Nothing,
        Err(_) => Read::End,
    }
}

/// Write all of `data` to the non-blocking `pipe`; false when the write failed (rank 0 is
/// gone or closed its stdin) or `stop` was set.
fn write_all(pipe: &mut ChildStdin, mut data: &[u8], stop: &AtomicBool) -> bool {
    while !data.is_empty() {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        match pipe.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLOUT)];
                match poll(&mut fds, POLL_MS) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return false,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::process::Command;

    fn cat_with(
        input: &JobInput,
    ) -> (std::process::Child, Option<JoinHandle<()>>, Arc<AtomicBool>) {
        let (stdio, rank0) = Rank0Input::prepare(input).expect("prepare");
        let mut child = Command::new("sh")
            .args(["-c", "cksum"])
            .stdin(stdio)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = rank0.start(child.stdin.take(), &stop);
        (child, feeder, stop)
    }

    fn cksum_of(data: &[u8]) -> String {
        let mut child = Command::new("cksum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cksum");
        let mut w = child.stdin.take().expect("stdin");
        let data = data.to_vec();
        let t = std::thread::spawn(move || w.write_all(&data));
        let out = child.wait_with_output().expect("cksum output");
        let _ = t.join();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn bytes_arrive_whole_and_end_with_eof() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (mut child, feeder, _stop) = cat_with(&JobInput::Bytes(data.clone().into()));
        let mut out = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("read");
        assert!(child.wait().expect("wait").success());
        feeder.expect("a feeder").join().expect("feeder");
        assert_eq!(out, cksum_of(&data));
    }

    #[test]
    fn a_reader_that_never_reads_does_not_hold_the_feeder() {
        let data: Arc<[u8]> = vec![1u8; 4 << 20].into();
        let (stdio, rank0) = Rank0Input::prepare(&JobInput::Bytes(data)).expect("prepare");
        let mut child = Command::new("sleep")
            .arg("0.3")
            .stdin(stdio)
            .spawn()
            .expect("spawn sleep");
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = rank0.start(child.stdin.take(), &stop).expect("feeder");
        assert!(child.wait().expect("wait").success());
        let t = std::time::Instant::now();
        feeder.join().expect("feeder");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        // A stop flag ends a feeder whose reader is still alive.
        let (stdio, rank0) =
            Rank0Input::prepare(&JobInput::Bytes(vec![2u8; 4 << 20].into())).expect("prepare");
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(stdio)
            .spawn()
            .expect("spawn sleep");
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = rank0.start(child.stdin.take(), &stop).expect("feeder");
        std::thread::sleep(std::time::Duration::from_millis(150));
        stop.store(true, Ordering::Relaxed);
        let t = std::time::Instant::now();
        feeder.join().expect("feeder");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_prefix_comes_before_a_file_or_bytes() {
        let path = std::env::temp_dir().join(format!("squall-prefix-test-{}", std::process::id()));
        let data = b"input line\n".repeat(5000);
        std::fs::write(&path, &data).expect("write");
        let prefix: Arc<[u8]> = b"key line\n".to_vec().into();
        for input in [
            JobInput::File(path.clone()),
            JobInput::Bytes(data.clone().into()),
        ] {
            let (stdio, rank0) =
                Rank0Input::prepare_after(&input, Some(prefix.clone())).expect("prepare");
            let mut child = Command::new("cat")
                .stdin(stdio)
                .stdout(Stdio::piped())
                .spawn()
                .expect("cat");
            let stop = Arc::new(AtomicBool::new(false));
            let feeder = rank0.start(child.stdin.take(), &stop).expect("a feeder");
            let mut out = Vec::new();
            child
                .stdout
                .take()
                .expect("stdout")
                .read_to_end(&mut out)
                .expect("read");
            assert!(child.wait().expect("wait").success());
            feeder.join().expect("feeder");
            let mut want = prefix.to_vec();
            want.extend_from_slice(&data);
            assert_eq!(out, want, "{input:?}");
        }
        // Nothing after the prefix: EOF right after it.
        let (stdio, rank0) =
            Rank0Input::prepare_after(&JobInput::Null, Some(prefix.clone())).expect("prepare");
        let mut child = Command::new("cat")
            .stdin(stdio)
            .stdout(Stdio::piped())
            .spawn()
            .expect("cat");
        let stop = Arc::new(AtomicBool::new(false));
        let feeder = rank0.start(child.stdin.take(), &stop).expect("a feeder");
        let out = child.wait_with_output().expect("output");
        feeder.join().expect("feeder");
        assert_eq!(out.stdout, prefix.to_vec());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_is_rank_0s_stdin_and_a_missing_one_is_named() {
        let path = std::env::temp_dir().join(format!("squall-stdin-test-{}", std::process::id()));
        let data = b"line one\nline two\n".repeat(1000);
        std::fs::write(&path, &data).expect("write");
        let (mut child, feeder, _stop) = cat_with(&JobInput::File(path.clone()));
        assert!(feeder.is_none(), "a file needs no feeder");
        let mut out = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("read");
        assert!(child.wait().expect("wait").success());
        assert_eq!(out, cksum_of(&data));
        let _ = std::fs::remove_file(&path);
        let err = Rank0Input::prepare(&JobInput::File(path.clone()))
            .err()
            .expect("a missing file is an error");
        assert!(err.to_string().contains(&path.display().to_string()));
    }
}
