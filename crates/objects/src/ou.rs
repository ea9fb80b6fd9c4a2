//! ENGINE_OU (seed §3.2.2.1): each segment has a permanent owner, spread round-robin over the
//! nodes; every `Read()`/`Write()` of a segment is performed by its owner, one at a time, so
//! a total order of the segment's accesses exists at the owner (sequential consistency).
//! Accesses on the owner itself are local; any other node sends one request and waits.
//!
//! Owns: the OU requests and the owner's service. Must not touch: MSI or NC state.

use crate::codec::Msg;
use crate::core::ObjectsCore;
use crate::{Completion, ObjError, ObjectId, Step};
use squall_core::NodeId;

impl ObjectsCore {
    pub(crate) fn ou_read(
        &mut self,
        id: ObjectId,
        idx: u64,
        waiter: u64,
    ) -> Result<Step<Vec<u8>>, ObjError> {
        let seg = self.obj(id)?.seg_of(idx);
        let owner = self.home_of(id, seg);
        if owner == self.me {
            self.stats.reads_local += 1;
            let v = self.local_value(id, idx)?;
            self.note(waiter, id, idx, false, &v);
            return Ok(Step::Ready(v));
        }
        if self.writes.contains_key(&waiter) || self.ou_reads.contains_key(&waiter) {
            return Err(ObjError::Busy(waiter));
        }
        self.stats.reads_remote += 1;
        self.ou_reads.insert(waiter, ());
        let m = Msg::OuReq {
            req: waiter,
            obj: id,
            idx,
            write: None,
        };
        self.send(owner, m, true);
        Ok(Step::Pending)
    }

    pub(crate) fn ou_write_step(&mut self, waiter: u64) -> Result<Step<()>, ObjError> {
        let Some(p) = self.writes.get_mut(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        if p.sent {
            return Ok(Step::Pending);
        }
        let (id, idx) = (p.obj, p.idx);
        let seg = self.obj(id)?.seg_of(idx);
        let owner = self.home_of(id, seg);
        if owner == self.me {
            self.perform(waiter)?;
            self.writes.remove(&waiter);
            self.stats.writes_local += 1;
            return Ok(Step::Ready(()));
        }
        let Some(p) = self.writes.get_mut(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        p.sent = true;
        let value = p.temp.clone();
        self.stats.writes_remote += 1;
        let m = Msg::OuReq {
            req: waiter,
            obj: id,
            idx,
            write: Some(value),
        };
        self.send(owner, m, true);
        Ok(Step::Pending)
    }

    /// The owner performs one access for `from`. Writes of this node's own threads that are
    /// begun but not yet performed on the segment are performed first (the OU form of
    /// Figure 7: each write happens exactly once, in the owner's order).
    pub(crate) fn ou_serve(
        &mut self,
        from: NodeId,
        req: u64,
        id: ObjectId,
        idx: u64,
        write: Option<Vec<u8>>,
    ) -> Result<(), ObjError> {
        let o = self.obj(id)?;
        if idx >= o.spec.len {
            return Err(ObjError::Malformed {
                from,
                why: format!("element {idx} out of range of object {id:?}"),
            });
        }
        let seg = o.seg_of(idx);
        if self.home_of(id, seg) != self.me {
            return Err(ObjError::Malformed {
                from,
                why: format!("OU access to segment {seg} of {id:?}, not owned here"),
            });
        }
        self.complete_flagged(id, seg)?;
        self.stats.ou_served += 1;
        let value = match write {
            Some(v) => {
                let o = self.obj_mut(id)?;
                if v.len() != o.elem {
                    return Err(ObjError::Malformed {
                        from,
                        why: format!("element of {} bytes", v.len()),
                    });
                }
                let r = o.elem_range(idx);
                o.data[r].copy_from_slice(&v);
                self.note(req, id, idx, true, &v);
                Vec::new()
            }
            None => {
                let v = self.local_value(id, idx)?;
                self.note(req, id, idx, false, &v);
                v
            }
        };
        self.send(from, Msg::OuReply { req, value }, true);
        Ok(())
    }

    pub(crate) fn ou_reply(&mut self, req: u64, value: Vec<u8>) -> Result<(), ObjError> {
        if self.ou_reads.remove(&req).is_some() {
            self.complete(req, Completion::Value(value));
            return Ok(());
        }
        match self.writes.get(&req) {
            Some(p) if p.sent => {
                self.writes.remove(&req);
                self.complete(req, Completion::Written);
                Ok(())
            }
            _ => Err(ObjError::Incoherent(format!(
                "OU reply to request {req} that is not waiting"
            ))),
        }
    }
}
