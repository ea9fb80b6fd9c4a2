//! Fault injection: `SQUALL_NET_FAULTS=loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7`,
//! and `partition=1-3@200ms`: from 200 ms after its network came up, each of nodes 1 and 3
//! drops every packet it would send to the other and every packet it receives from it (tcp
//! and udp), so both sides' peer timeouts fire as on a cut network ([`Partition`]).
//!
//! Owns the spec parser and a sans-IO injector that decides, deterministically per seed (ChaCha),
//! the fate of each outgoing packet. It keeps no sockets and reads no clock: `now` is passed in.
//! For udp it acts on datagrams (loss, duplication, reordering, delay). For tcp only delay and
//! reorder-in-time apply (a reliable stream cannot lose or duplicate); loss/dup are rejected.
use crate::error::NetError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Parsed fault settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is sent twice.
    pub dup: f64,
    /// Probability that a datagram is held back and overtaken by later ones.
    pub reorder: f64,
    /// Delay added to every packet.
    pub delay: Duration,
    /// RNG seed (ChaCha8): same seed, same decisions.
    pub seed: u64,
    /// Every packet between two nodes dropped from a moment on.
    pub partition: Option<Partition>,
}

/// `partition=A-B@T`: nodes A and B stop hearing each other `at` after each one's network
/// came up (both directions; every other pair is untouched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub a: u16,
    pub b: u16,
    pub at: Duration,
}

impl Partition {
    /// The node this one is cut off from, if `rank` is one side of the partition.
    pub fn peer_of(&self, rank: u16) -> Option<u16> {
        if rank == self.a {
            Some(self.b)
        } else if rank == self.b {
            Some(self.a)
        } else {
            None
        }
    }

    fn parse(v: &str) -> Option<Partition> {
        let (pair, at) = match v.split_once('@') {
            Some((p, t)) => (p, parse_duration(t)?),
            None => (v, Duration::ZERO),
        };
        let (a, b) = pair.split_once('-')?;
        let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        (a != b).then_some(Partition { a, b, at })
    }
}

/// The cut of one link (tcp peer, or udp peer address) as seen from one side: nothing passes
/// from `from` on. Pure: the caller passes the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub peer: u16,
    pub from: Instant,
}

impl Cut {
    /// The cut this node (`rank`, network up at `start`) applies, if it is a side of `spec`'s
    /// partition.
    pub fn of(spec: Option<&FaultSpec>, rank: u16, start: Instant) -> Option<Cut> {
        let p = spec?.partition?;
        Some(Cut {
            peer: p.peer_of(rank)?,
            from: start + p.at,
        })
    }

    /// Does the cut drop a packet to or from `peer` at `now`?
    pub fn drops(&self, peer: u16, now: Instant) -> bool {
        peer == self.peer && now >= self.from
    }
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay: Duration::ZERO,
            seed: 0,
            partition: None,
        }
    }
}

fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (num, mul_ns) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else {
        (v, 1e3) // bare number: microseconds
    };
    let x: f64 = num.trim().parse().ok()?;
    if !x.is_finite() || x < 0.0 || x * mul_ns > 60e9 {
        return None;
    }
    Some(Duration::from_nanos((x * mul_ns) as u64))
}

impl FaultSpec {
    /// Parses `key=value` pairs separated by commas. Keys: loss, dup, reorder (probabilities
    /// 0..=1), delay (`50us`, `2ms`, `0.1s`; bare numbers are microseconds), seed (integer),
    /// partition (`A-B@T`: two different ranks and a delay, `@T` optional: from the start).
    pub fn parse(s: &str) -> Result<FaultSpec, NetError> {
        let mut spec = FaultSpec::default();
        let bad = |msg: String| {
            NetError::Config(format!(
                "SQUALL_NET_FAULTS={s:?}: {msg} (expected e.g. loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7)"
            ))
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            let prob = |v: &str| -> Result<f64, NetError> {
                match v.parse::<f64>() {
                    Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                    _ => Err(bad(format!(
                        "{k}={v:?} is not a probability between 0 and 1"
                    ))),
                }
            };
            match k {
                "loss" => spec.loss = prob(v)?,
                "dup" => spec.dup = prob(v)?,
                "reorder" => spec.reorder = prob(v)?,
                "delay" => {
                    spec.delay = parse_duration(v)
                        .ok_or_else(|| bad(format!("delay={v:?} is not a duration like 50us")))?
                }
                "partition" => {
                    spec.partition = Some(Partition::parse(v).ok_or_else(|| {
                        bad(format!(
                        "partition={v:?} is not two different ranks and a moment, like 1-3@200ms"
                    ))
                    })?)
                }
                "seed" => {
                    spec.seed = v
                        .parse()
                        .map_err(|_| bad(format!("seed={v:?} is not an integer")))?
                }
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        if spec.loss >= 1.0 {
            return Err(bad("loss=1 would never deliver anything".into()));
        }
        Ok(spec)
    }

    /// True if this spec changes nothing.
    pub fn is_noop(&self) -> bool {
        self.per_packet_noop() && self.partition.is_none()
    }

    /// True if no packet's fate is drawn (no loss, dup, reorder or delay; a partition may
    /// still cut one link, see [`Cut`]).
    pub fn per_packet_noop(&self) -> bool {
        self.loss == 0.0 && self.dup == 0.0 && self.reorder == 0.0 && self.delay.is_zero()
    }

    /// Rejects settings a reliable stream cannot honour.
    pub fn check_for_tcp(&self) -> Result<(), NetError> {
        if self.loss > 0.0 || self.dup > 0.0 {
            return Err(NetError::Config(format!(
                "SQUALL_NET_FAULTS: loss={} dup={} cannot be applied to tcp (a reliable stream); \
                 use SQUALL_TRANSPORT=udp, or only delay/reorder with tcp",
                self.loss, self.dup
            )));
        }
        Ok(())
    }
}

/// Extra hold time of a reordered packet beyond the configured delay.
const REORDER_LAG: Duration = Duration::from_micros(300);

/// Sans-IO injector: `submit` each outgoing packet, then take what is due with `release`.
#[derive(Debug)]
pub struct FaultInjector<T> {
    spec: FaultSpec,
    rng: ChaCha8Rng,
    held: BTreeMap<(Instant, u64), T>,
    counter: u64,
    /// Decisions that changed a packet's fate (drops, dups, reorders, delays).
    pub injected: u64,
    /// Keep per-stream order (tcp): a packet is never released before an earlier one.
    fifo: bool,
    last_release: Option<Instant>,
}

impl<T: Clone> FaultInjector<T> {
    /// An injector for datagrams (may drop, duplicate and reorder).
    pub fn datagrams(spec: FaultSpec, stream_salt: u64) -> Self {
        Self::new(spec, stream_salt, false)
    }
    /// An injector for a stream transport (delay and reorder-in-time only, order kept).
    pub fn stream(spec: FaultSpec, stream_salt: u64) -> Self {
        Self::new(spec, stream_salt, true)
    }
    fn new(spec: FaultSpec, stream_salt: u64, fifo: bool) -> Self {
        let seed = spec
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(stream_salt);
        FaultInjector {
            spec,
            rng: ChaCha8Rng::seed_from_u64(seed),
            held: BTreeMap::new(),
            counter: 0,
            injected: 0,
            fifo,
            last_release: None,
        }
    }

    fn hold(&mut self, at: Instant, item: T) {
        let at = if self.fifo {
            let at = self.last_release.map_or(at, |l| at.max(l));
            self.last_release = Some(at);
            at
        } else {
            at
        };
        self.counter += 1;
        self.held.insert((at, self.counter), item);
    }

    /// Decides the fate of one packet; those due now are pushed to `out`.
    pub fn submit(&mut self, now: Instant, item: T, out: &mut Vec<T>) {
        if !self.fifo && self.spec.loss > 0.0 && self.rng.gen_bool(self.spec.loss) {
            self.injected += 1;
            return;
        }
        let copies = if !self.fifo && self.spec.dup > 0.0 && self.rng.gen_bool(self.spec.dup) {
            self.injected += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = now + self.spec.delay;
            if self.spec.reorder > 0.0 && self.rng.gen_bool(self.spec.reorder) {
                self.injected += 1;
                at += REORDER_LAG + self.spec.delay;
            }
            if !self.spec.delay.is_zero() {
                self.injected += 1;
            }
            let item = item.clone();
            if at <= now && (self.held.is_empty() || !self.fifo) {
                out.push(item);
            } else {
                self.hold(at, item);
            }
        }
        self.release(now, out);
    }

    /// Pushes every held packet whose time has come to `out`.
    pub fn release(&mut self, now: Instant, out: &mut Vec<T>) {
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            out.push(entry.remove());
        }
    }

    /// When the next held packet is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.held.keys().next().map(|k| k.0)
    }

    /// Number of packets held back.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_spec() {
        let s = FaultSpec::parse("loss=0.05,dup=0.02,reorder=0.05,delay=50us,seed=7").expect("ok");
        assert_eq!(s.loss, 0.05);
        assert_eq!(s.dup, 0.02);
        assert_eq!(s.reorder, 0.05);
        assert_eq!(s.delay, Duration::from_micros(50));
        assert_eq!(s.seed, 7);
    }

    #[test]
    fn parse_errors_are_clear() {
        let e = FaultSpec::parse("loss=2")
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("loss=\"2\""), "{e}");
        let e = FaultSpec::parse("bogus=1")
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("unknown key \"bogus\""), "{e}");
        let e = FaultSpec::parse("delay=fast")
            .expect_err("must fail")
            .to_string();
        assert!(e.contains("delay"), "{e}");
        let e = FaultSpec::parse("loss=0.1").expect("ok").check_for_tcp();
        assert!(e
            .expect_err("must fail")
            .to_string()
            .contains("SQUALL_TRANSPORT=udp"));
    }

    #[test]
    fn partition_spec_and_cut() {
        let s = FaultSpec::parse("partition=1-3@200ms,seed=2").expect("ok");
        assert_eq!(
            s.partition,
            Some(Partition {
                a: 1,
                b: 3,
                at: Duration::from_millis(200)
            })
        );
        assert!(!s.is_noop());
        assert!(s.per_packet_noop(), "a partition draws no per-packet fate");
        assert!(s.check_for_tcp().is_ok(), "tcp can be cut");
        let t0 = Instant::now();
        let cut = Cut::of(Some(&s), 3, t0).expect("node 3 is a side");
        assert_eq!(cut.peer, 1);
        assert!(!cut.drops(1, t0 + Duration::from_millis(199)));
        assert!(cut.drops(1, t0 + Duration::from_millis(200)));
        assert!(
            !cut.drops(2, t0 + Duration::from_secs(9)),
            "other links untouched"
        );
        assert!(Cut::of(Some(&s), 2, t0).is_none(), "node 2 is no side");
        let now = FaultSpec::parse("partition=0-2").expect("ok");
        assert_eq!(now.partition.map(|p| p.at), Some(Duration::ZERO));
        for bad in [
            "partition=1-1@5ms",
            "partition=1@5ms",
            "partition=a-b",
            "partition=1-2@soon",
        ] {
            let e = FaultSpec::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("1-3@200ms"), "{e}");
        }
    }

    #[test]
    fn deterministic_per_seed_and_lossy() {
        let spec = FaultSpec::parse("loss=0.3,dup=0.1,reorder=0.2,seed=9").expect("ok");
        let run = || {
            let mut f = FaultInjector::datagrams(spec, 1);
            let now = Instant::now();
            let mut out = Vec::new();
            for i in 0..1000u32 {
                f.submit(now, i, &mut out);
            }
            f.release(now + Duration::from_secs(1), &mut out);
            out
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.len() < 900 && a.len() > 600, "{}", a.len());
        assert!(
            a.windows(2).any(|w| w[0] > w[1]),
            "some reordering expected"
        );
    }

    #[test]
    fn stream_mode_keeps_order() {
        let spec = FaultSpec::parse("reorder=0.5,delay=10us,seed=3").expect("ok");
        let mut f = FaultInjector::stream(spec, 0);
        let t0 = Instant::now();
        let mut out = Vec::new();
        for i in 0..200u32 {
            f.submit(t0 + Duration::from_micros(u64::from(i)), i, &mut out);
        }
        f.release(t0 + Duration::from_secs(1), &mut out);
        assert_eq!(out, (0..200).collect::<Vec<_>>());
    }
}
