//! ENGINE_NC (seed §3.2.2.2): no coherence state at all. `Read()` returns this node's copy;
//! `Write()` updates it and broadcasts an update notice to every other node as a one-way
//! message marked unreliable (no acknowledgement, never waited for). The seed's NC disables
//! guaranteed delivery, so "certain processors may never become aware of all other
//! processor's writes"; the simulator models that by losing NC notices. On Squall's backbone
//! (reliable, FIFO per pair) notices do arrive, but nothing orders them with other nodes'
//! writes, locks or barriers: no use of `DSM_Lock`/`DSM_Barrier` upgrades NC's consistency.
//! The figure-7 race does not concern NC (no permission ever changes).
//!
//! Owns: the NC write and the notice handler. Must not touch: OU or MSI state.

use crate::codec::Msg;
use crate::core::ObjectsCore;
use crate::{ObjError, ObjectId, Step};
use squall_core::NodeId;

impl ObjectsCore {
    pub(crate) fn nc_write(&mut self, waiter: u64) -> Result<Step<()>, ObjError> {
        let Some(p) = self.writes.get(&waiter) else {
            return Err(ObjError::NoWrite(waiter));
        };
        let (id, idx, value) = (p.obj, p.idx, p.temp.clone());
        self.perform(waiter)?;
        self.writes.remove(&waiter);
        self.stats.writes_local += 1;
        for n in 0..self.nodes {
            if NodeId(n) != self.me {
                self.stats.nc_updates_sent += 1;
                let m = Msg::NcUpdate {
                    obj: id,
                    idx,
                    value: value.clone(),
                };
                self.send(NodeId(n), m, false);
            }
        }
        Ok(Step::Ready(()))
    }

    pub(crate) fn nc_apply(
        &mut self,
        from: NodeId,
        id: ObjectId,
        idx: u64,
        value: &[u8],
    ) -> Result<(), ObjError> {
        let o = self.obj_mut(id)?;
        if idx >= o.spec.len || value.len() != o.elem {
            return Err(ObjError::Malformed {
                from,
                why: format!("NC update of element {idx} ({} bytes)", value.len()),
            });
        }
        let r = o.elem_range(idx);
        o.data[r].copy_from_slice(value);
        self.stats.nc_updates_applied += 1;
        Ok(())
    }
}
