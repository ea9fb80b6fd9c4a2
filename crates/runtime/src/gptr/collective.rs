//! OpenSHMEM's collectives over an active set (`PE_start`, `logPE_stride`, `PE_size`) built on
//! the one-sided operations and the caller's `pSync` words, as implementations over one-sided
//! networks do: broadcast (the root puts the data, then adds 1 to each member's `pSync[0]`),
//! reductions (every member announces its arrival by adding 1 to every other member's
//! `pSync[0]`, gets every member's source, reduces in member order (the same result on every
//! member), announces its departure on `pSync[1]`, then writes its `dest`: `dest` may be the
//! source), and the active-set barrier. The counters are added to and taken back atomically,
//! so `pSync` returns to `SHMEM_SYNC_VALUE` (0) and back-to-back calls cannot lose a signal.
//! `pWrk` is not needed.
//!
//! Owns these algorithms; must not touch the engine directly.
use super::{Cmp, Gptr};
use crate::error::{Result, SquallError};
use parking_lot::Mutex;
use squall_core::NodeId;
use squall_gptr::{AtomicKind, Width};
use std::sync::Arc;

/// An OpenSHMEM active set: `size` nodes from `start`, `2^log_stride` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSet {
    pub start: u16,
    pub log_stride: u32,
    pub size: u16,
}

impl ActiveSet {
    /// Every node of a job of `n`.
    pub fn world(n: u16) -> Self {
        ActiveSet {
            start: 0,
            log_stride: 0,
            size: n,
        }
    }

    /// The members, checked against the job size.
    pub fn members(&self, nodes: u16) -> Result<Vec<NodeId>> {
        let stride = 1u32.checked_shl(self.log_stride).unwrap_or(0);
        let v: Option<Vec<NodeId>> = (0..u32::from(self.size))
            .map(|i| {
                let r = u32::from(self.start).checked_add(i.checked_mul(stride)?)?;
                (r < u32::from(nodes)).then_some(NodeId(r as u16))
            })
            .collect();
        match v {
            Some(v) if !v.is_empty() && stride > 0 => Ok(v),
            _ => Err(SquallError::Config(format!(
                "active set start {} log stride {} size {} does not fit a job of {nodes} nodes",
                self.start, self.log_stride, self.size
            ))),
        }
    }
}

/// Reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    And,
    Or,
    Xor,
}

/// Numbers a reduction combines.
pub trait Reducible: super::Elem {
    /// `None` if the operator does not apply (bitwise operators on floats).
    fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self>;
}

macro_rules! int_reduce {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::And => a & b,
                    ReduceOp::Or => a | b,
                    ReduceOp::Xor => a ^ b,
                })
            }
        }
    )*};
}
int_reduce!(i16, u16, i32, u32, i64, u64, isize, usize, i8, u8);

macro_rules! float_reduce {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                    _ => return None,
                })
            }
        }
    )*};
}
float_reduce!(f32, f64);

impl Gptr {
    /// Add 1 to word `psync_word` of every member but this node, then wait until this node's
    /// own word counted the other members' additions, and take them back.
    fn signal_all(&self, members: &[NodeId], psync_word: usize) -> Result<()> {
        let me = self.rank();
        for &p in members.iter().filter(|&&p| p != me) {
            self.atomic_nb(p, psync_word, Width::W8, AtomicKind::Add, 1)?;
        }
        let others = members.len() as u64 - 1;
        self.wait_signals(psync_word, others)
    }

    /// Wait until this node's `psync_word` reached `n`, then subtract `n`.
    fn wait_signals(&self, psync_word: usize, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.wait_until(psync_word, Width::W8, Cmp::Ge, n)?;
        self.local_atomic(psync_word, Width::W8, AtomicKind::Add, n.wrapping_neg(), 0)?;
        Ok(())
    }

    fn member_index(&self, members: &[NodeId], what: &str) -> Result<usize> {
        let me = self.rank();
        members.iter().position(|&p| p == me).ok_or_else(|| {
            SquallError::Config(format!("{what}: {me} is not a member of the active set"))
        })
    }

    /// `shmem_broadcast`: the root (the member at `root_index`) sends `nbytes` at `src` to
    /// `dest` of every other member; the root's own `dest` is not written (OpenSHMEM 1.4).
    pub fn broadcast(
        &self,
        dest: usize,
        src: usize,
        nbytes: usize,
        root_index: usize,
        set: ActiveSet,
        psync: usize,
    ) -> Result<()> {
        let members = set.members(self.size())?;
        self.member_index(&members, "broadcast")?;
        let root = *members.get(root_index).ok_or_else(|| {
            SquallError::Config(format!(
                "broadcast: root index {root_index} outside an active set of {}",
                members.len()
            ))
        })?;
        if root == self.rank() {
            let mut data = vec![0u8; nbytes];
            self.get(root, src, &mut data)?;
            for &p in members.iter().filter(|&&p| p != root) {
                // Applied in order at p: the data, then the signal.
                self.put_nb(p, dest, &data)?;
                self.atomic_nb(p, psync, Width::W8, AtomicKind::Add, 1)?;
            }
            self.sync()
        } else {
            self.wait_signals(psync, 1)
        }
    }

    /// `shmem_TYPE_OP_to_all`: `dest[i]` = `op` over the members of `src[i]`, on every member.
    /// Uses `psync` words 0 and 1.
    pub fn reduce<T: Reducible>(
        &self,
        dest: usize,
        src: usize,
        count: usize,
        op: ReduceOp,
        set: ActiveSet,
        psync: usize,
    ) -> Result<()> {
        let members = set.members(self.size())?;
        self.member_index(&members, "reduction")?;
        if T::combine(op, T::from_bits(0), T::from_bits(0)).is_none() {
            return Err(SquallError::Config(format!(
                "reduction {op:?} does not apply to this type"
            )));
        }
        self.sync()?;
        self.signal_all(&members, psync)?;
        let nbytes = count * T::SIZE;
        let parts: Arc<Mutex<Vec<Option<Vec<u8>>>>> =
            Arc::new(Mutex::new(vec![None; members.len()]));
        for (i, &p) in members.iter().enumerate() {
            let parts = parts.clone();
            self.get_nb(
                p,
                src,
                nbytes,
                Box::new(move |b: &[u8]| parts.lock()[i] = Some(b.to_vec())),
            )?;
        }
        self.sync()?;
        let parts = std::mem::take(&mut *parts.lock());
        let mut acc: Option<Vec<T>> = None;
        for part in parts {
            let b = part.ok_or_else(|| {
                SquallError::Remote("reduction: a member's data did not arrive".into())
            })?;
            let v: Vec<T> = b.chunks_exact(T::SIZE).map(T::from_bytes).collect();
            acc = Some(match acc {
                None => v,
                Some(a) => a
                    .into_iter()
                    .zip(v)
                    .map(|(x, y)| T::combine(op, x, y).unwrap_or(x))
                    .collect(),
            });
        }
        // Everyone has read every source before anyone writes its dest (dest may be src).
        self.signal_all(&members, psync + 8)?;
        let mut out = vec![0u8; nbytes];
        for (x, c) in acc
            .unwrap_or_default()
            .iter()
            .zip(out.chunks_exact_mut(T::SIZE))
        {
            x.put_bytes(c);
        }
        self.put(self.rank(), dest, &out)
    }

    /// `shmem_barrier`: quiet, then every member signals every other on `psync[0]`.
    pub fn barrier_set(&self, set: ActiveSet, psync: usize) -> Result<()> {
        let members = set.members(self.size())?;
        self.member_index(&members, "barrier")?;
        self.sync()?;
        self.signal_all(&members, psync)
    }
}
