//! The runtime's message handlers: protocol and sync traffic into the service state,
//! collective values, statistics, thread creation and joins, heap calls from other nodes.
//! Owns the decoding of the runtime's own messages; must not block the service thread.

use super::alloc::{free_local, size_local};
use super::spawn::start_thread;
use super::{collective, node, Mailboxes};
use crate::failure;
use crate::msg;
use crate::profile::NodeProfile;
use crate::service::{fatal, Reply, Service};
use crate::stats::NodeReport;
use crate::threads::{self, Joiner, SpawnMsg};
use parking_lot::Mutex;
use squall_core::ThreadId;
use squall_net::Endpoint;
use std::sync::Arc;

pub(super) fn register_handlers(ep: &Endpoint, svc: Arc<Mutex<Service>>, boxes: Mailboxes) {
    let Mailboxes {
        coll,
        stats_in,
        profile_in,
        done,
        regions,
    } = boxes;
    ep.register(msg::REGION, move |ep, m| {
        regions.on_message(ep, m.src, &m.payload)
    });
    let s = svc.clone();
    ep.register(msg::PROTO, move |ep, m| {
        s.lock().on_protocol_message(ep, m.src, &m.payload)
    });
    let s = svc.clone();
    ep.register(msg::SYNC, move |ep, m| {
        s.lock().on_sync_message(ep, m.src, &m.payload)
    });
    ep.register(msg::COLLECTIVE, move |ep, m| {
        match collective::decode(&m.payload) {
            Some((seq, v)) => coll.put(seq, v),
            None => fatal(
                ep.rank(),
                &format!("malformed collective message from {}", m.src),
            ),
        }
    });
    ep.register(msg::OBJECT, crate::objects::on_message);
    ep.register(msg::ABORT, move |ep, m| {
        failure::on_notice(ep, m.src, &m.payload)
    });
    ep.register(msg::DONE, move |_, m| done.put(u64::from(m.src.0), ()));
    ep.register(msg::STATS, move |ep, m| {
        match serde_json::from_slice::<NodeReport>(&m.payload) {
            Ok(st) => stats_in.put(u64::from(m.src.0), st),
            Err(e) => eprintln!("squall: {}: bad statistics from {}: {e}", ep.rank(), m.src),
        }
    });
    ep.register(msg::PROFILE, move |ep, m| {
        match serde_json::from_slice::<NodeProfile>(&m.payload) {
            Ok(p) => profile_in.put(u64::from(m.src.0), p),
            Err(e) => eprintln!("squall: {}: bad profile from {}: {e}", ep.rank(), m.src),
        }
    });
    ep.register(msg::STATS_MARK, move |ep, m| match node() {
        Ok(n) => n.record_mark(),
        Err(e) => eprintln!("squall: {}: stats mark from {}: {e}", ep.rank(), m.src),
    });
    let s = svc.clone();
    ep.register(msg::SPAWN, move |ep, m| {
        let answer = match SpawnMsg::decode(&m.payload) {
            None => threads::encode_err(
                threads::ERR_OTHER,
                &format!("malformed spawn request from {}", m.src),
            ),
            Some(sp) => match start_thread(&mut s.lock(), sp) {
                Ok(()) => threads::encode_join_ok(0, &[]),
                Err(e) => threads::encode_err(threads::ERR_OTHER, &e),
            },
        };
        if let Err(e) = ep.reply(&m, answer) {
            eprintln!(
                "squall: {}: could not answer a spawn from {}: {e}",
                ep.rank(),
                m.src
            );
        }
    });
    let s = svc.clone();
    ep.register(msg::JOIN, move |ep, m| {
        let Ok(b) = <[u8; 8]>::try_from(m.payload.as_ref()) else {
            let _ = ep.reply(
                &m,
                threads::encode_err(threads::ERR_OTHER, "malformed join request"),
            );
            return;
        };
        let tid = ThreadId(u64::from_le_bytes(b));
        s.lock().join(ep, tid, Joiner::Remote(m));
    });
    let s = svc;
    ep.register(msg::HEAP, move |ep, m| {
        let p = &m.payload;
        let reply: Vec<u8> = if p.first() == Some(&super::alloc::HEAP_CLAIM) {
            super::alloc::claim_reply(&mut s.lock(), p)
        } else if p.len() != 9 {
            format!("malformed heap request from {}", m.src).into_bytes()
        } else {
            let addr = u64::from_le_bytes(p[1..9].try_into().unwrap_or([0; 8])) as usize;
            let mut g = s.lock();
            match p[0] {
                0 => match free_local(&mut g, addr) {
                    Reply::Failed(e) => e.to_string().into_bytes(),
                    _ => Vec::new(),
                },
                _ => size_local(&mut g, addr)
                    .map(|n| n as u64)
                    .unwrap_or(u64::MAX)
                    .to_le_bytes()
                    .to_vec(),
            }
        };
        if let Err(e) = ep.reply(&m, reply) {
            eprintln!("squall: {}: could not answer {}: {e}", ep.rank(), m.src);
        }
    });
}
