//! Trace descriptions of `hlrc` messages (the simulator's `--trace`).
//!
//! Owns: the text form of a message. Must not touch: protocol state, the wire format (it
//! decodes with `msg`).

use super::msg::{Handover, Msg};
use crate::shared::diff::for_each_run;
use squall_core::{HeapLayout, NodeId, PAGE_SIZE};

/// A one-line description of an `hlrc` message for traces (the simulator's `--trace`): its
/// kind and fields, page contents shown as their non-zero 8-byte words (`offset=value`).
pub fn describe(from: NodeId, layout: HeapLayout, bytes: &[u8]) -> String {
    fn words(data: &[u8]) -> String {
        let mut out = Vec::new();
        for (p, page) in data.chunks(PAGE_SIZE).enumerate() {
            for (i, w) in page.chunks_exact(8).enumerate() {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                let v = u64::from_le_bytes(b);
                if v != 0 {
                    out.push(format!("{}+{}={v:#x}", p, i * 8));
                }
            }
        }
        format!("[{}]", out.join(" "))
    }
    fn handover(h: &Handover) -> String {
        format!(
            "epoch {} copyset {:?} {}",
            h.epoch,
            h.copyset,
            words(&h.data)
        )
    }
    let msg = match Msg::decode(from, layout, bytes) {
        Ok(m) => m,
        Err(e) => return format!("undecodable: {e}"),
    };
    let kind = msg.kind();
    match msg {
        Msg::PageRun { first, data } => format!("{kind} {first} {}", words(&data)),
        Msg::PageData {
            page,
            data,
            exclusive,
        } => format!("{kind} {page} exclusive={exclusive} {}", words(&data)),
        Msg::RecallReply { page, data } => {
            format!(
                "{kind} {page} {}",
                data.map_or("none".into(), |d| words(&d))
            )
        }
        Msg::Push {
            first,
            interval,
            data,
        } => format!("{kind} {first} interval={interval} {}", words(&data)),
        Msg::Diff {
            page,
            origin,
            id,
            epoch,
            diff,
        } => {
            let mut runs = Vec::new();
            for_each_run(&diff, |off, b| runs.push(format!("{off}:{b:02x?}")));
            format!(
                "{kind} {page} origin={origin} id={id} epoch={epoch} [{}]",
                runs.join(" ")
            )
        }
        Msg::DiffAck { page, id, migrate } => format!(
            "{kind} {page} id={id} migrate={}",
            migrate.map_or("no".into(), |h| handover(&h))
        ),
        Msg::Handovers { first, items } => {
            let items: Vec<String> = items.iter().map(handover).collect();
            format!("{kind} {first} {}", items.join("; "))
        }
        other => format!("{other:?}"),
    }
}
