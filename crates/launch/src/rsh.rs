//! The remote-shell launcher kind (`--hosts`, `--hostfile`, `--rsh`): node `r` runs on
//! `hosts[r % len]` as `RSH HOST 'env SQUALL_RANK=.. ... PROGRAM ARGS'`, bound to 0.0.0.0.
//! With authentication on, the command first reads the job key from its standard input
//! (`IFS= read -r SQUALL_AUTH_KEY`: the launcher writes it as the first line of each remote
//! shell's stdin, so it is never on a command line, where `ps` on either host would show it).
//! Owns host lists, shell quoting and choosing the rendezvous host; must not spawn or
//! supervise (that is [`crate::job`]).
use crate::error::LaunchError;
use crate::local::free_port;
use crate::spec::{JobSpec, RshOptions};
use squall_core::env;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::process::Command;

/// Read a hostfile: one host per line, `#` starts a comment, and `host slots=K` (or
/// `host:K`) repeats a host K times.
pub fn read_hostfile(path: &Path) -> Result<Vec<String>, LaunchError> {
    let text = std::fs::read_to_string(path).map_err(|source| LaunchError::Hostfile {
        path: path.to_path_buf(),
        source,
    })?;
    parse_hostfile(&text).map_err(|(line, text)| LaunchError::HostfileLine {
        path: path.to_path_buf(),
        line,
        text,
    })
}

/// Parse hostfile text (see [`read_hostfile`]); on error, the 1-based line and its text.
pub fn parse_hostfile(text: &str) -> Result<Vec<String>, (usize, String)> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || (i + 1, raw.to_string());
        let mut words = line.split_whitespace();
        let first = words.next().ok_or_else(bad)?;
        let (host, mut slots) = match first.rsplit_once(':') {
            Some((h, k)) if !h.contains(':') => (h, k.parse::<usize>().map_err(|_| bad())?),
            _ => (first, 1),
        };
        for w in words {
            match w.strip_prefix("slots=") {
                Some(k) => slots = k.parse::<usize>().map_err(|_| bad())?,
                None => return Err(bad()),
            }
        }
        // More slots than node ids is a typo (and would fill memory with host names).
        if host.is_empty() || slots == 0 || slots > usize::from(u16::MAX) {
            return Err(bad());
        }
        for _ in 0..slots {
            hosts.push(host.to_string());
        }
    }
    Ok(hosts)
}

/// Quote `word` for a POSIX shell (the remote shell parses the command line again).
pub fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Is `host` this machine (by name or by one of the addresses it resolves to)?
fn is_local_host(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        if name.trim() == host {
            return true;
        }
    }
    match (host, 0).to_socket_addrs() {
        Ok(mut addrs) => {
            addrs.any(|a| a.ip().is_loopback() || std::net::TcpListener::bind((a.ip(), 0)).is_ok())
        }
        Err(_) => false,
    }
}

/// First IPv4 (else any) address `host` resolves to.
fn resolve(host: &str) -> Result<IpAddr, LaunchError> {
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| LaunchError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| LaunchError::Resolve {
            host: host.to_string(),
            reason: "no addresses".to_string(),
        })
}

/// This machine's source address toward `peer` (no packet is sent: a UDP connect only picks
/// the route).
fn local_addr_toward(peer: IpAddr) -> Option<IpAddr> {
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    sock.connect((peer, 9)).ok()?;
    sock.local_addr().ok().map(|a| a.ip())
}

/// The host part of the rendezvous address: the override if given; else, when rank 0 runs on
/// this machine, this machine's address (loopback if every host is local); else rank 0's
/// host's address.
pub fn rendezvous_ip(opts: &RshOptions) -> Result<String, LaunchError> {
    if let Some(h) = &opts.rendezvous_host {
        return Ok(h.clone());
    }
    let first = opts.hosts.first().ok_or(LaunchError::NoHosts)?;
    if is_local_host(first) {
        if opts.hosts.iter().all(|h| is_local_host(h)) {
            return Ok("127.0.0.1".to_string());
        }
        let other = opts
            .hosts
            .iter()
            .find(|h| !is_local_host(h))
            .map(|h| resolve(h))
            .transpose()?;
        let ip = other
            .and_then(local_addr_toward)
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        return Ok(ip.to_string());
    }
    Ok(resolve(first)?.to_string())
}

/// One command per rank: the remote shell, the host, then the quoted remote command line.
/// Besides the launcher's variables, every `SQUALL_*` variable set in this process's
/// environment is passed on (the remote side does not inherit it).
pub fn commands(
    spec: &JobSpec,
    opts: &RshOptions,
    job_id: u64,
    key_on_stdin: bool,
) -> Result<Vec<Command>, LaunchError> {
    if opts.hosts.is_empty() {
        return Err(LaunchError::NoHosts);
    }
    let (rsh, rsh_args) = opts.rsh.split_first().ok_or(LaunchError::EmptyRsh)?;
    let ip = rendezvous_ip(opts)?;
    let port = free_port(Ipv4Addr::UNSPECIFIED)?;
    let rendezvous = if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    };
    // A relative program path is made absolute: the remote shell starts in the home directory.
    let program = if spec.program.contains('/') && !spec.program.starts_with('/') {
        std::env::current_dir()
            .map(|d| d.join(&spec.program).to_string_lossy().into_owned())
            .unwrap_or_else(|_| spec.program.clone())
    } else {
        spec.program.clone()
    };
    let mut out = Vec::with_capacity(spec.nodes);
    for rank in 0..spec.nodes {
        let host = &opts.hosts[rank % opts.hosts.len()];
        let rank = u16::try_from(rank).map_err(|_| LaunchError::TooManyNodes(spec.nodes))?;
        let mut vars = spec.node_env(rank, &rendezvous, job_id);
        vars.push((env::BIND_ADDR.to_string(), "0.0.0.0".to_string()));
        for (k, v) in std::env::vars() {
            // A key of this process's environment never goes on a command line.
            if k.starts_with("SQUALL_") && k != env::AUTH_KEY && !vars.iter().any(|(n, _)| *n == k)
            {
                vars.push((k, v));
            }
        }
        let mut line = String::new();
        if key_on_stdin {
            // POSIX `read` takes one line and leaves the rest of stdin to the program.
            line.push_str(&format!(
                "IFS= read -r {k} && export {k} && ",
                k = env::AUTH_KEY
            ));
        }
        line.push_str("exec env");
        for (k, v) in &vars {
            line.push(' ');
            line.push_str(&shell_quote(&format!("{k}={v}")));
        }
        line.push(' ');
        line.push_str(&shell_quote(&program));
        for a in &spec.args {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        let mut cmd = Command::new(rsh);
        cmd.args(rsh_args).arg(host).arg(line);
        out.push(cmd);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfile_expands_slots_and_skips_comments() {
        let hosts =
            parse_hostfile("# cluster\nalpha slots=2\n\nbeta:3 # three\ngamma\n").expect("parse");
        assert_eq!(
            hosts,
            vec!["alpha", "alpha", "beta", "beta", "beta", "gamma"]
        );
        assert_eq!(parse_hostfile("a slots=x\n"), Err((1, "a slots=x".into())));
        assert!(parse_hostfile("a b\n").is_err());
    }

    #[test]
    fn shell_quote_survives_sh() {
        for word in ["plain", "with space", "it's", "$HOME", "", "a\"b"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(word)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }

    #[test]
    fn rendezvous_is_loopback_when_all_hosts_are_local() {
        let opts = RshOptions {
            hosts: vec!["localhost".into(), "localhost".into()],
            ..RshOptions::default()
        };
        assert_eq!(rendezvous_ip(&opts).expect("ip"), "127.0.0.1");
        let opts = RshOptions {
            rendezvous_host: Some("10.1.2.3".into()),
            ..opts
        };
        assert_eq!(rendezvous_ip(&opts).expect("ip"), "10.1.2.3");
    }

    #[test]
    fn remote_command_line_carries_the_environment() {
        let spec = JobSpec::local(2, "./prog", vec!["a b".into()]);
        let opts = RshOptions {
            hosts: vec!["localhost".into()],
            rsh: vec!["myrsh".into(), "-q".into()],
            rendezvous_host: None,
        };
        let cmds = commands(&spec, &opts, 1, false).expect("commands");
        let args: Vec<String> = cmds[1]
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(cmds[1].get_program(), "myrsh");
        assert_eq!(args[0], "-q");
        assert_eq!(args[1], "localhost");
        assert!(args[2].starts_with("exec env SQUALL_RANK=1 SQUALL_SIZE=2"));
        assert!(args[2].contains("SQUALL_BIND_ADDR=0.0.0.0"));
        assert!(args[2].ends_with("/prog 'a b'"));
        let cmds = commands(&spec, &opts, 1, true).expect("commands");
        let line = cmds[0]
            .get_args()
            .nth(2)
            .expect("line")
            .to_string_lossy()
            .into_owned();
        assert!(
            line.starts_with("IFS= read -r SQUALL_AUTH_KEY && export SQUALL_AUTH_KEY && exec env"),
            "{line}"
        );
    }

    #[test]
    fn the_key_read_from_stdin_reaches_the_program_and_leaves_the_rest() {
        // What the remote shell runs, with sh standing in for `ssh HOST`.
        let spec = JobSpec::local(
            1,
            "sh",
            vec!["-c".into(), "echo \"$SQUALL_AUTH_KEY\"; cat".into()],
        );
        let opts = RshOptions {
            hosts: vec!["localhost".into()],
            rsh: vec!["sh".into(), "-c".into()],
            rendezvous_host: Some("127.0.0.1".into()),
        };
        let cmds = commands(&spec, &opts, 1, true).expect("commands");
        let line = cmds[0]
            .get_args()
            .nth(2)
            .expect("line")
            .to_string_lossy()
            .into_owned();
        let mut child = Command::new("sh")
            .args(["-c", &line])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        use std::io::Write;
        let key = "ab".repeat(32);
        let mut w = child.stdin.take().expect("stdin");
        w.write_all(format!("{key}\nrest of the input\n").as_bytes())
            .expect("write");
        drop(w);
        let out = child.wait_with_output().expect("output");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{key}\nrest of the input\n")
        );
        assert!(!line.contains(&key));
    }
}
