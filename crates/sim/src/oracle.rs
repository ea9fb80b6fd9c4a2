//! The simulator's synchronization oracle: a centralized lock and barrier manager that calls
//! the `Consistency` hooks in the documented order (see `squall_core::consistency`) and lets
//! the world carry the info bytes as delayed messages.
//!
//! Owns: lock ownership and wait queues, barrier arrival bookkeeping. Must not touch: page
//! state (only the `Consistency` hooks). This is the seam where the real distributed managers
//! of `squall-sync` can replace it: they need the same four calls (acquire_info at the
//! requester, grant_info at the last releaser after its release completed, apply_grant at the
//! acquirer, barrier_info/apply_barrier around a barrier).

use squall_core::NodeId;
use squall_protocol::Protocol;
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
struct LockState {
    held: bool,
    /// Node of the last completed release.
    last: Option<NodeId>,
    queue: VecDeque<(usize, Vec<u8>)>,
}

/// Locks: FIFO hand-off; grants carry the last releaser's `grant_info`.
#[derive(Debug, Default)]
pub struct LockOracle {
    locks: BTreeMap<u64, LockState>,
}

/// `(thread to grant, grant info to apply at its node)`.
pub type Grant = Option<(usize, Option<Vec<u8>>)>;

impl LockOracle {
    /// A thread's request (with its node's `acquire_info`) reached the manager.
    pub fn request(
        &mut self,
        lock: u64,
        thread: usize,
        info: Vec<u8>,
        cores: &mut [Box<dyn Protocol>],
    ) -> Grant {
        let st = self.locks.entry(lock).or_default();
        if st.held {
            st.queue.push_back((thread, info));
            return None;
        }
        st.held = true;
        let grant = st.last.map(|n| cores[n.index()].grant_info(&info));
        Some((thread, grant))
    }

    /// The holder on `node` finished its release (`begin_release` completed).
    pub fn release(&mut self, lock: u64, node: NodeId, cores: &mut [Box<dyn Protocol>]) -> Grant {
        let st = self.locks.entry(lock).or_default();
        st.held = false;
        st.last = Some(node);
        let (t, info) = st.queue.pop_front()?;
        st.held = true;
        Some((t, Some(cores[node.index()].grant_info(&info))))
    }
}

/// One global barrier, reused.
#[derive(Debug)]
pub struct BarrierOracle {
    infos: Vec<Option<Vec<u8>>>,
}

impl BarrierOracle {
    pub fn new(nodes: u16) -> Self {
        BarrierOracle {
            infos: vec![None; usize::from(nodes)],
        }
    }

    /// A node arrived (after its release) with its `barrier_info`; when the last one arrives,
    /// returns every node's info in rank order.
    pub fn arrive(&mut self, node: NodeId, info: Vec<u8>) -> Option<Vec<Vec<u8>>> {
        self.infos[node.index()] = Some(info);
        if self.infos.iter().any(Option::is_none) {
            return None;
        }
        Some(self.infos.iter_mut().filter_map(Option::take).collect())
    }
}
