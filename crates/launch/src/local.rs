//! The local launcher kind: every node is a child process on this machine, reaching rank 0's
//! rendezvous listener on a free loopback port. Owns building those commands; must not spawn
//! or supervise them (that is [`crate::job`]). With authentication on, the job key is in each
//! node's environment (`SQUALL_AUTH_KEY`: private to the user, never on a command line).
use crate::error::LaunchError;
use crate::spec::{resolve_program, JobSpec};
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;

/// A TCP port on `ip` that nothing listens on right now, for rank 0's rendezvous listener.
/// It is chosen below the kernel's ephemeral range (read from
/// `/proc/sys/net/ipv4/ip_local_port_range`, 32768.. by default): ports that `bind(0)` hands
/// out — such as the nodes' own transport sockets, bound moments later — can then never take
/// it before rank 0 binds it. Random within 20000..ephemeral-start, checked free by binding.
pub fn free_port(ip: Ipv4Addr) -> Result<u16, LaunchError> {
    let eph_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u16>().ok())
        })
        .unwrap_or(32768);
    let (lo, hi) = (20000u16, eph_start.max(20001));
    let mut last = None;
    for _ in 0..64 {
        let port = lo + (rand::random::<u16>() % (hi - lo));
        match TcpListener::bind((ip, port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    // Crowded below the ephemeral range: fall back to one the kernel picks.
    let listener = TcpListener::bind((ip, 0)).map_err(|e| LaunchError::Port(last.unwrap_or(e)))?;
    Ok(listener.local_addr().map_err(LaunchError::Port)?.port())
}

/// One command per rank, with the environment of [`JobSpec::node_env`] and the job key.
pub fn commands(
    spec: &JobSpec,
    job_id: u64,
    key: Option<&str>,
) -> Result<Vec<Command>, LaunchError> {
    let program = resolve_program(&spec.program)?;
    let port = free_port(Ipv4Addr::LOCALHOST)?;
    let rendezvous = format!("127.0.0.1:{port}");
    let mut out = Vec::with_capacity(spec.nodes);
    for rank in 0..spec.nodes {
        let rank = u16::try_from(rank).map_err(|_| LaunchError::TooManyNodes(spec.nodes))?;
        let mut cmd = Command::new(&program);
        cmd.args(&spec.args);
        for (k, v) in spec.node_env(rank, &rendezvous, job_id) {
            cmd.env(k, v);
        }
        if let Some(key) = key {
            cmd.env(squall_core::env::AUTH_KEY, key);
        }
        out.push(cmd);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_point_every_rank_at_one_rendezvous() {
        let spec = JobSpec::local(3, "sh", vec!["-c".into(), "true".into()]);
        let cmds = commands(&spec, 7, None).expect("commands");
        assert_eq!(cmds.len(), 3);
        let rendezvous: Vec<String> = cmds
            .iter()
            .map(|c| {
                c.get_envs()
                    .find(|(k, _)| *k == "SQUALL_RENDEZVOUS")
                    .and_then(|(_, v)| v)
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        assert!(rendezvous[0].starts_with("127.0.0.1:"));
        assert!(rendezvous.iter().all(|r| r == &rendezvous[0]));
    }
}
