//! The mpirun launcher kind (`squall run --launcher mpirun`): the whole job is one
//! `mpirun -n N PROGRAM ARGS` command; every node learns its rank and size from MPI
//! (`SQUALL_TRANSPORT=mpi`, no rendezvous). Owns building that command and splitting mpirun's
//! `--tag-output` lines back into per-rank lines; must not spawn or supervise (that is
//! [`crate::job`]).
//!
//! The supervisor sees a single process (mpirun, reported as node 0): mpirun itself ends the
//! job when a rank fails and exits non-zero.
use crate::error::LaunchError;
use crate::output::{LineSink, Stream};
use crate::spec::{resolve_program, JobSpec};
use squall_core::env;
use std::process::Command;
use std::sync::Arc;

/// Settings of the mpirun launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpirunOptions {
    /// The launcher program: `mpirun` (Open MPI, MPICH) or a path to one.
    pub mpirun: String,
    /// Extra arguments placed before the program (`--mpirun-args "--hostfile hosts"`).
    pub extra_args: Vec<String>,
}

impl Default for MpirunOptions {
    fn default() -> Self {
        MpirunOptions {
            mpirun: "mpirun".to_string(),
            extra_args: Vec::new(),
        }
    }
}

/// Is this process running as root (Open MPI then needs `--allow-run-as-root`)?
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The variables every rank gets (no rank, no rendezvous: MPI provides those).
pub fn job_env(spec: &JobSpec, job_id: u64) -> Vec<(String, String)> {
    let mut vars = vec![
        (env::SIZE.to_string(), spec.nodes.to_string()),
        (env::JOB_ID.to_string(), format!("{job_id:016x}")),
        (env::TRANSPORT.to_string(), "mpi".to_string()),
    ];
    if let Some(faults) = &spec.net_faults {
        vars.push((env::NET_FAULTS.to_string(), faults.clone()));
    }
    if spec.stats {
        vars.push((env::STATS.to_string(), "1".to_string()));
    }
    // MPI carries the packets; [`JobSpec::validate`] refuses `--auth on` here.
    vars.push((env::AUTH.to_string(), "off".to_string()));
    vars.extend(spec.extra_env.iter().cloned());
    vars
}

/// The argument list after the mpirun program itself.
pub fn mpirun_args(
    spec: &JobSpec,
    opts: &MpirunOptions,
    program: &str,
    vars: &[(String, String)],
    as_root: bool,
    cores: usize,
) -> Vec<String> {
    let mut args = vec!["-n".to_string(), spec.nodes.to_string()];
    let user_has = |flag: &str| opts.extra_args.iter().any(|a| a == flag);
    if as_root && !user_has("--allow-run-as-root") {
        args.push("--allow-run-as-root".into());
    }
    if spec.nodes > cores && !user_has("--oversubscribe") && !user_has("--host") {
        args.push("--oversubscribe".into());
    }
    args.push("--tag-output".into());
    for (k, _) in vars {
        // `-x NAME` exports this process's value to every rank, remote ones too.
        args.push("-x".into());
        args.push(k.clone());
    }
    args.extend(opts.extra_args.iter().cloned());
    args.push(program.to_string());
    args.extend(spec.args.iter().cloned());
    args
}

/// The one command that starts the whole job.
pub fn commands(
    spec: &JobSpec,
    opts: &MpirunOptions,
    job_id: u64,
) -> Result<Vec<Command>, LaunchError> {
    let program = resolve_program(&spec.program)?;
    let mpirun = resolve_program(&opts.mpirun)?;
    let vars = job_env(spec, job_id);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = mpirun_args(
        spec,
        opts,
        &program.to_string_lossy(),
        &vars,
        running_as_root(),
        cores,
    );
    let mut cmd = Command::new(mpirun);
    cmd.args(args);
    for k in [env::RANK, env::RENDEZVOUS, env::LOCAL_NODES] {
        cmd.env_remove(k);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    Ok(vec![cmd])
}

/// Splits `[1,R]<stdout>:text` (mpirun `--tag-output`) into rank R's line `text`; mpirun's
/// own lines go through as node 0's.
pub fn untag(line: &[u8]) -> Option<(u16, Stream, &[u8])> {
    let rest = line.strip_prefix(b"[")?;
    let close = rest.iter().position(|b| *b == b']')?;
    let inside = std::str::from_utf8(&rest[..close]).ok()?;
    let rank: u16 = inside.rsplit(',').next()?.trim().parse().ok()?;
    let rest = &rest[close + 1..];
    let (stream, rest) = if let Some(r) = rest.strip_prefix(b"<stdout>:") {
        (Stream::Stdout, r)
    } else if let Some(r) = rest.strip_prefix(b"<stderr>:") {
        (Stream::Stderr, r)
    } else {
        return None;
    };
    Some((rank, stream, rest))
}

/// A sink that undoes mpirun's output tags before handing lines on.
struct Untag {
    inner: Arc<dyn LineSink>,
}

impl LineSink for Untag {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        match untag(line) {
            Some((r, s, text)) => self.inner.line(r, s, text),
            None => self.inner.line(rank, stream, line),
        }
    }
}

/// Wraps `sink` so it sees each rank's lines under that rank.
pub fn untagging_sink(sink: Arc<dyn LineSink>) -> Arc<dyn LineSink> {
    Arc::new(Untag { inner: sink })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LauncherKind;

    #[test]
    fn args_add_root_oversubscribe_and_exports() {
        let mut spec = JobSpec::local(4, "true", vec!["--size".into(), "9".into()]);
        spec.launcher = LauncherKind::Mpirun(MpirunOptions::default());
        spec.stats = true;
        let opts = MpirunOptions {
            extra_args: vec!["--mca".into(), "btl".into(), "self,vader".into()],
            ..MpirunOptions::default()
        };
        let vars = job_env(&spec, 0xabc);
        let a = mpirun_args(&spec, &opts, "/bin/prog", &vars, true, 2);
        let joined = a.join(" ");
        assert!(joined.starts_with("-n 4 --allow-run-as-root --oversubscribe --tag-output"));
        assert!(
            joined.contains("-x SQUALL_SIZE -x SQUALL_JOB_ID -x SQUALL_TRANSPORT -x SQUALL_STATS"),
            "{joined}"
        );
        assert!(
            joined.ends_with("--mca btl self,vader /bin/prog --size 9"),
            "{joined}"
        );
        let a = mpirun_args(&spec, &MpirunOptions::default(), "p", &vars, false, 8);
        assert!(!a
            .iter()
            .any(|x| x == "--allow-run-as-root" || x == "--oversubscribe"));
        assert!(vars.contains(&("SQUALL_TRANSPORT".into(), "mpi".into())));
        assert!(vars.contains(&("SQUALL_JOB_ID".into(), "0000000000000abc".into())));
        assert!(!vars
            .iter()
            .any(|(k, _)| k == "SQUALL_RANK" || k == "SQUALL_RENDEZVOUS"));
    }

    #[test]
    fn tagged_lines_go_to_their_rank() {
        assert_eq!(
            untag(b"[1,3]<stdout>:hello [x]"),
            Some((3, Stream::Stdout, &b"hello [x]"[..]))
        );
        assert_eq!(
            untag(b"[12,0]<stderr>:"),
            Some((0, Stream::Stderr, &b""[..]))
        );
        assert_eq!(untag(b"mpirun noticed that process rank 1"), None);
        assert_eq!(untag(b"[a,b]<stdout>:x"), None);
    }
}
