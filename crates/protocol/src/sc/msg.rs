//! `sc` messages and their wire encoding: the message kinds (`Kind`, the first byte) and
//! `Msg` with its encoder and decoder (every field checked against the job's layout; a bad
//! message is a typed `ProtoError::Malformed`).
//!
//! Owns: the bytes on the wire. Must not touch: protocol state.

use crate::shared::atomic::{decode_call, decode_infos, encode_call, encode_infos};
use crate::shared::codec::{Reader, Writer};
use crate::{AtomicCall, ProtoError};
use squall_core::{HeapLayout, NodeId, PageId};

/// The kind of an `sc` message: its first byte on the wire (the numbers are the format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    HomeQuery = 1,
    HomeReply = 2,
    Req = 3,
    Grant = 4,
    Inv = 5,
    InvAck = 6,
    Recall = 7,
    RecallAck = 8,
    Atomic = 9,
    AtomicReply = 10,
}

impl Kind {
    const ALL: [Kind; 10] = [
        Kind::HomeQuery,
        Kind::HomeReply,
        Kind::Req,
        Kind::Grant,
        Kind::Inv,
        Kind::InvAck,
        Kind::Recall,
        Kind::RecallAck,
        Kind::Atomic,
        Kind::AtomicReply,
    ];

    fn tag(self) -> u8 {
        self as u8
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }

    /// The name statistics count the kind under.
    fn name(self) -> &'static str {
        match self {
            Kind::HomeQuery => "home_query",
            Kind::HomeReply => "home_reply",
            Kind::Req => "request",
            Kind::Grant => "grant",
            Kind::Inv => "invalidate",
            Kind::InvAck => "invalidate_ack",
            Kind::Recall => "recall",
            Kind::RecallAck => "recall_ack",
            Kind::Atomic => "atomic",
            Kind::AtomicReply => "atomic_reply",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Msg {
    HomeQuery {
        page: PageId,
    },
    HomeReply {
        page: PageId,
        home: Option<NodeId>,
    },
    Req {
        page: PageId,
        write: bool,
    },
    Grant {
        page: PageId,
        write: bool,
        data: Option<Vec<u8>>,
    },
    Inv {
        page: PageId,
    },
    InvAck {
        page: PageId,
    },
    Recall {
        page: PageId,
        invalidate: bool,
    },
    RecallAck {
        page: PageId,
        data: Vec<u8>,
    },
    Atomic {
        page: PageId,
        offset: u16,
        call: AtomicCall,
        token: u64,
    },
    AtomicReply {
        token: u64,
        old: u64,
        infos: Vec<Vec<u8>>,
    },
}

impl Msg {
    fn tag(&self) -> Kind {
        match self {
            Msg::HomeQuery { .. } => Kind::HomeQuery,
            Msg::HomeReply { .. } => Kind::HomeReply,
            Msg::Req { .. } => Kind::Req,
            Msg::Grant { .. } => Kind::Grant,
            Msg::Inv { .. } => Kind::Inv,
            Msg::InvAck { .. } => Kind::InvAck,
            Msg::Recall { .. } => Kind::Recall,
            Msg::RecallAck { .. } => Kind::RecallAck,
            Msg::Atomic { .. } => Kind::Atomic,
            Msg::AtomicReply { .. } => Kind::AtomicReply,
        }
    }

    pub(super) fn kind(&self) -> &'static str {
        self.tag().name()
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            Msg::HomeQuery { page } => Writer::new(Kind::HomeQuery.tag()).page(*page).finish(),
            Msg::HomeReply { page, home } => {
                let mut w = Writer::new(Kind::HomeReply.tag());
                w.page(*page);
                match home {
                    Some(h) => w.u8(1).node(*h),
                    None => w.u8(0),
                };
                w.finish()
            }
            Msg::Req { page, write } => Writer::new(Kind::Req.tag())
                .page(*page)
                .u8(u8::from(*write))
                .finish(),
            Msg::Grant { page, write, data } => {
                let mut w = Writer::new(Kind::Grant.tag());
                w.page(*page).u8(u8::from(*write));
                match data {
                    Some(d) => w.u8(1).bytes(d),
                    None => w.u8(0),
                };
                w.finish()
            }
            Msg::Inv { page } => Writer::new(Kind::Inv.tag()).page(*page).finish(),
            Msg::InvAck { page } => Writer::new(Kind::InvAck.tag()).page(*page).finish(),
            Msg::Recall { page, invalidate } => Writer::new(Kind::Recall.tag())
                .page(*page)
                .u8(u8::from(*invalidate))
                .finish(),
            Msg::RecallAck { page, data } => Writer::new(Kind::RecallAck.tag())
                .page(*page)
                .bytes(data)
                .finish(),
            Msg::Atomic {
                page,
                offset,
                call,
                token,
            } => {
                let mut w = Writer::new(Kind::Atomic.tag());
                w.page(*page).u16(*offset);
                encode_call(&mut w, call);
                w.u64(*token).finish()
            }
            Msg::AtomicReply { token, old, infos } => {
                let mut w = Writer::new(Kind::AtomicReply.tag());
                w.u64(*token).u64(*old);
                encode_infos(&mut w, infos);
                w.finish()
            }
        }
    }

    pub(super) fn decode(from: NodeId, layout: HeapLayout, b: &[u8]) -> Result<Msg, ProtoError> {
        let mut r = Reader::new(from, b);
        let t = layout.total_pages;
        let tag = r.u8()?;
        let Some(kind) = Kind::from_tag(tag) else {
            return Err(r.err(format!("unknown sc message tag {tag}")));
        };
        let m = match kind {
            Kind::HomeQuery => Msg::HomeQuery { page: r.page(t)? },
            Kind::HomeReply => {
                let page = r.page(t)?;
                let home = if r.bool()? {
                    Some(r.node(layout.nodes)?)
                } else {
                    None
                };
                Msg::HomeReply { page, home }
            }
            Kind::Req => Msg::Req {
                page: r.page(t)?,
                write: r.bool()?,
            },
            Kind::Grant => {
                let page = r.page(t)?;
                let write = r.bool()?;
                let data = if r.bool()? {
                    Some(r.page_data()?.to_vec())
                } else {
                    None
                };
                Msg::Grant { page, write, data }
            }
            Kind::Inv => Msg::Inv { page: r.page(t)? },
            Kind::InvAck => Msg::InvAck { page: r.page(t)? },
            Kind::Recall => Msg::Recall {
                page: r.page(t)?,
                invalidate: r.bool()?,
            },
            Kind::RecallAck => Msg::RecallAck {
                page: r.page(t)?,
                data: r.page_data()?.to_vec(),
            },
            Kind::Atomic => Msg::Atomic {
                page: r.page(t)?,
                offset: r.u16()?,
                call: decode_call(&mut r)?,
                token: r.u64()?,
            },
            Kind::AtomicReply => Msg::AtomicReply {
                token: r.u64()?,
                old: r.u64()?,
                infos: decode_infos(&mut r, layout.nodes)?,
            },
        };
        r.end()?;
        Ok(m)
    }
}
