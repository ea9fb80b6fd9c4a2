//! The router's own bytes: the tag in front of every protocol message (which core it is
//! for), the router's messages (allocation announcements, claims of the global part and their
//! acks), and the framing of
//! synchronization info (one part per core).
//!
//! Owns: these encodings; every bad input is a typed `Malformed`. Must not touch: the cores'
//! own message formats (a core's message travels behind its tag untouched).

use super::policy::Coherence;
use crate::shared::codec::{Reader, Writer};
use crate::{ProtoError, ProtocolKind};
use squall_core::{NodeId, PageId, Placement};

/// The tag of the router's own messages (core indices are below it).
pub(crate) const ROUTER_TAG: u8 = 0xff;

const KIND_ANNOUNCE: u8 = 1;
const KIND_ACK: u8 = 2;
const KIND_CLAIM: u8 = 3;

const PLACE_FIRST_TOUCH: u8 = 0;
const PLACE_ROUND_ROBIN: u8 = 1;
const PLACE_BLOCKED: u8 = 2;
const PLACE_NODE: u8 = 3;

/// The index of `kind`'s core (its message tag).
pub(crate) fn core_index(kind: ProtocolKind) -> usize {
    match kind {
        ProtocolKind::Hlrc => 0,
        ProtocolKind::Sc => 1,
        ProtocolKind::User(i) => 2 + usize::from(i),
    }
}

/// A router message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouterMsg {
    /// The sender allocated `pages` pages from `first` under `coherence` (not the job
    /// default); answer with `Ack { token }` once recorded.
    Announce {
        token: u64,
        first: PageId,
        pages: u64,
        coherence: Coherence,
    },
    Ack {
        token: u64,
    },
    /// The sender claimed `pages` pages from `first` in the global part under `coherence`
    /// (any, the default too) and `placement`: register the allocation (this node manages its
    /// stripes of it) and answer with `Ack { token }`.
    Claim {
        token: u64,
        first: PageId,
        pages: u64,
        coherence: Coherence,
        placement: Placement,
    },
}

fn put_coherence(w: &mut Writer, c: Coherence) {
    w.u8(core_index(c.protocol) as u8)
        .u32(c.unit_pages)
        .u8(u8::from(c.updates));
}

fn get_coherence(r: &mut Reader<'_>) -> Result<Coherence, ProtoError> {
    let protocol = match r.u8()? {
        0 => ProtocolKind::Hlrc,
        1 => ProtocolKind::Sc,
        c if c < ROUTER_TAG => ProtocolKind::User(c - 2),
        c => return Err(r.err(format!("announced protocol core {c} unknown"))),
    };
    let coherence = Coherence {
        protocol,
        unit_pages: r.u32()?,
        updates: r.bool()?,
    };
    coherence.check().map_err(|e| r.err(e.to_string()))?;
    Ok(coherence)
}

fn get_range(r: &mut Reader<'_>, total_pages: u64) -> Result<(PageId, u64), ProtoError> {
    let first = r.page(total_pages)?;
    let pages = r.u64()?;
    if first.0.checked_add(pages).is_none_or(|e| e > total_pages) {
        return Err(r.err(format!(
            "announced range {first}+{pages} leaves the global range"
        )));
    }
    Ok((first, pages))
}

impl RouterMsg {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RouterMsg::Announce { .. } => "router.announce",
            RouterMsg::Ack { .. } => "router.ack",
            RouterMsg::Claim { .. } => "router.claim",
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(ROUTER_TAG);
        match *self {
            RouterMsg::Announce {
                token,
                first,
                pages,
                coherence,
            } => {
                w.u8(KIND_ANNOUNCE).u64(token).page(first).u64(pages);
                put_coherence(&mut w, coherence);
            }
            RouterMsg::Claim {
                token,
                first,
                pages,
                coherence,
                placement,
            } => {
                w.u8(KIND_CLAIM).u64(token).page(first).u64(pages);
                put_coherence(&mut w, coherence);
                match placement {
                    Placement::FirstTouch => w.u8(PLACE_FIRST_TOUCH).u64(0),
                    Placement::RoundRobin { block_pages } => {
                        w.u8(PLACE_ROUND_ROBIN).u64(block_pages)
                    }
                    Placement::Blocked => w.u8(PLACE_BLOCKED).u64(0),
                    Placement::Node(n) => w.u8(PLACE_NODE).u64(u64::from(n.0)),
                };
            }
            RouterMsg::Ack { token } => {
                w.u8(KIND_ACK).u64(token);
            }
        }
        w.finish()
    }

    /// Decode a router message (`bytes` starts with [`ROUTER_TAG`]).
    pub(crate) fn decode(from: NodeId, total_pages: u64, bytes: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(from, bytes);
        let _tag = r.u8()?;
        let m = match r.u8()? {
            KIND_ANNOUNCE => {
                let token = r.u64()?;
                let (first, pages) = get_range(&mut r, total_pages)?;
                let coherence = get_coherence(&mut r)?;
                RouterMsg::Announce {
                    token,
                    first,
                    pages,
                    coherence,
                }
            }
            KIND_CLAIM => {
                let token = r.u64()?;
                let (first, pages) = get_range(&mut r, total_pages)?;
                let coherence = get_coherence(&mut r)?;
                let kind = r.u8()?;
                let arg = r.u64()?;
                let placement = match kind {
                    PLACE_FIRST_TOUCH => Placement::FirstTouch,
                    PLACE_ROUND_ROBIN => Placement::RoundRobin { block_pages: arg },
                    PLACE_BLOCKED => Placement::Blocked,
                    PLACE_NODE => Placement::Node(NodeId(
                        u16::try_from(arg).map_err(|_| r.err(format!("placement node {arg}")))?,
                    )),
                    k => return Err(r.err(format!("unknown placement kind {k}"))),
                };
                RouterMsg::Claim {
                    token,
                    first,
                    pages,
                    coherence,
                    placement,
                }
            }
            KIND_ACK => RouterMsg::Ack { token: r.u64()? },
            k => return Err(r.err(format!("unknown router message kind {k}"))),
        };
        r.end()?;
        Ok(m)
    }
}

/// Frame the cores' synchronization infos: `(core index u8, length u32, bytes)` per core
/// with something to say (empty infos are left out, so a job whose cores say nothing sends
/// nothing).
pub(crate) fn frame_infos(parts: impl IntoIterator<Item = (usize, Vec<u8>)>) -> Vec<u8> {
    let mut w = Writer::default();
    for (core, info) in parts {
        if !info.is_empty() {
            w.u8(core as u8).bytes(&info);
        }
    }
    w.finish()
}

/// Split framed synchronization info into its parts; `None` if it is malformed.
pub(crate) fn split_infos(bytes: &[u8], cores: usize) -> Option<Vec<(usize, &[u8])>> {
    let mut r = Reader::new(NodeId(0), bytes);
    let mut out = Vec::new();
    let mut left = bytes.len();
    while left > 0 {
        let core = usize::from(r.u8().ok()?);
        let info = r.bytes().ok()?;
        if core >= cores {
            return None;
        }
        out.push((core, info));
        left = left.checked_sub(5 + info.len())?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_messages_round_trip_and_reject_garbage() {
        let c = Coherence {
            protocol: ProtocolKind::Sc,
            unit_pages: 1,
            updates: false,
        };
        for m in [
            RouterMsg::Announce {
                token: 7,
                first: PageId(3),
                pages: 9,
                coherence: c,
            },
            RouterMsg::Ack { token: 7 },
            RouterMsg::Claim {
                token: 8,
                first: PageId(10),
                pages: 90,
                coherence: c,
                placement: Placement::RoundRobin { block_pages: 3 },
            },
            RouterMsg::Claim {
                token: 9,
                first: PageId(0),
                pages: 1,
                coherence: c,
                placement: Placement::Node(NodeId(2)),
            },
        ] {
            let b = m.encode();
            assert_eq!(b[0], ROUTER_TAG);
            assert_eq!(RouterMsg::decode(NodeId(1), 100, &b).ok(), Some(m));
            for cut in 0..b.len() {
                assert!(RouterMsg::decode(NodeId(1), 100, &b[..cut]).is_err());
            }
        }
        let beyond = RouterMsg::Announce {
            token: 1,
            first: PageId(95),
            pages: 9,
            coherence: c,
        }
        .encode();
        assert!(RouterMsg::decode(NodeId(1), 100, &beyond).is_err());
    }

    #[test]
    fn infos_frame_and_split() {
        let f = frame_infos([(0, vec![1, 2]), (1, vec![]), (2, vec![3])]);
        let parts = split_infos(&f, 3).expect("well formed");
        assert_eq!(parts, vec![(0, &[1u8, 2][..]), (2, &[3u8][..])]);
        assert_eq!(split_infos(&[], 3), Some(vec![]));
        assert_eq!(split_infos(&f, 2), None, "core index out of range");
        assert_eq!(split_infos(&f[..f.len() - 1], 3), None);
    }
}
