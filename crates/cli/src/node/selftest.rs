//! `squall __node selftest`: a checked ring exchange used by the launcher tests. Every node
//! sends ROUNDS numbered messages to the next rank and ROUNDS requests, and checks that the
//! messages from the previous rank arrive exactly once, in order, with intact payloads, and
//! that every reply echoes its request. Owns this program only.
use super::{channel, finish, join, notify, read_u64, ring_neighbours, ty, Barrier, NodeError};
use bytes::Bytes;
use clap::Args;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// Messages (and requests) each node sends to the next rank.
    #[arg(long, default_value_t = 200)]
    pub rounds: u64,
    /// Payload bytes per message (at least 16).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
}

/// Payload for round `i` from `rank`: round, rank, then a byte pattern.
pub fn payload(rank: u16, i: u64, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size.max(16)];
    p[..8].copy_from_slice(&i.to_le_bytes());
    p[8..10].copy_from_slice(&rank.to_le_bytes());
    for (k, b) in p.iter_mut().enumerate().skip(16) {
        *b = (k as u64)
            .wrapping_mul(31)
            .wrapping_add(i)
            .wrapping_add(u64::from(rank)) as u8;
    }
    p
}

pub fn run(a: SelftestArgs) -> Result<(), NodeError> {
    let t0 = Instant::now();
    let ep = join()?;
    let barrier = Barrier::install(&ep);
    let (prev, next) = ring_neighbours(&ep);
    let rank = ep.rank();
    let size = a.size.max(16);
    let rounds = a.rounds;

    let (tx, rx) = channel::<Result<u64, String>>();
    let mut expected = 0u64;
    ep.register(ty::RING, move |_, inc| {
        let check = if inc.src != prev {
            Err(format!(
                "{rank}: ring message from {} (expected {prev})",
                inc.src
            ))
        } else {
            let i = read_u64(&inc.payload).unwrap_or(u64::MAX);
            if i != expected {
                Err(format!(
                    "{rank}: message {i} from {prev} arrived when {expected} was due"
                ))
            } else if inc.payload[..] != payload(prev.0, i, size)[..] {
                Err(format!(
                    "{rank}: message {i} from {prev} has a corrupt payload"
                ))
            } else {
                expected += 1;
                Ok(expected)
            }
        };
        notify(&tx, check);
    });
    ep.register(ty::ECHO, |ep, inc| {
        if let Err(e) = ep.reply(&inc, inc.payload.clone()) {
            eprintln!("echo reply to {} failed: {e}", inc.src);
        }
    });

    for i in 0..rounds {
        ep.send(next, ty::RING, Bytes::from(payload(rank.0, i, size)))?;
    }
    for i in 0..rounds {
        let p = Bytes::from(payload(rank.0, i, size));
        let back = ep.request(next, ty::ECHO, p.clone())?;
        if back != p {
            return Err(NodeError::Check(format!(
                "{rank}: reply {i} from {next} does not echo the request"
            )));
        }
    }
    let mut got = 0;
    while got < rounds {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(n)) => got = n,
            Ok(Err(msg)) => return Err(NodeError::Check(msg)),
            Err(_) => {
                return Err(NodeError::Check(format!(
                    "{rank}: only {got} of {rounds} ring messages from {prev} arrived"
                )))
            }
        }
    }
    finish(&ep, &barrier)?;
    println!(
        "selftest ok: {rank} of {} received {rounds} in-order messages from {prev} and {rounds} replies from {next} in {:.0} ms; {} packets authenticated",
        ep.size(),
        t0.elapsed().as_secs_f64() * 1e3,
        ep.stats().packets_authenticated
    );
    Ok(())
}
