//! The typed Rust API over [`Gptr`]: global pointers `(node, address)` with Split-C's
//! operations (blocking read and write, split-phase get and put completed by `sync()`, one-way
//! stores, bulk forms of each, remote atomics) and spread arrays distributed block-cyclically.
//!
//! ```no_run
//! use squall::{GlobalPtr, SpreadArray};
//! let node = squall::init()?;
//! let g = node.gptr()?;
//! // 1000 doubles, blocks of 10 dealt to the nodes in turn.
//! let a = SpreadArray::<f64>::alloc(g, 1000, 10)?;
//! let right = a.ptr(((node.rank().0 as usize + 1) % node.size() as usize) * 10);
//! right.write(g, 1.5)?;              // blocking
//! let v = right.get(g)?;             // split-phase
//! g.sync()?;
//! assert_eq!(v.value()?, 1.5);
//! g.all_store_sync()?;
//! # Ok::<(), squall::SquallError>(())
//! ```
//!
//! Owns the typed views and the spread-array layout; must not touch the engine directly.
use super::Gptr;
use crate::error::{Result, SquallError};
use parking_lot::Mutex;
use squall_core::NodeId;
use squall_gptr::{AtomicKind, Width};
use std::marker::PhantomData;
use std::sync::Arc;

/// Element types of global pointers: plain numbers, moved as their native bytes.
pub trait Elem: Copy + Send + Sync + 'static {
    const SIZE: usize;
    fn put_bytes(self, out: &mut [u8]);
    fn from_bytes(b: &[u8]) -> Self;
    /// The value's bits, zero-extended (what remote atomics carry).
    fn to_bits(self) -> u64;
    fn from_bits(v: u64) -> Self;
}

macro_rules! elem {
    ($($t:ty => $bits:ty),* $(,)?) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put_bytes(self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_ne_bytes());
            }
            fn from_bytes(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn to_bits(self) -> u64 {
                u64::from(<$bits>::from_ne_bytes(self.to_ne_bytes()))
            }
            fn from_bits(v: u64) -> Self {
                <$t>::from_ne_bytes((v as $bits).to_ne_bytes())
            }
        }
    )*};
}
elem!(u8 => u8, i8 => u8, u16 => u16, i16 => u16, u32 => u32, i32 => u32, u64 => u64,
      i64 => u64, usize => u64, isize => u64, f32 => u32, f64 => u64);

fn to_bytes<T: Elem>(v: &[T]) -> Vec<u8> {
    let mut b = vec![0u8; v.len() * T::SIZE];
    for (x, c) in v.iter().zip(b.chunks_exact_mut(T::SIZE)) {
        x.put_bytes(c);
    }
    b
}

fn from_bytes<T: Elem>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(T::SIZE).map(T::from_bytes).collect()
}

/// The result of a split-phase get: available after [`Gptr::sync`].
pub struct Pending<R> {
    slot: Arc<Mutex<Option<Vec<u8>>>>,
    decode: fn(&[u8]) -> R,
}

impl<R> Pending<R> {
    /// The value; an error if the get has not completed (call `sync()` first) or failed
    /// (`sync()` reported it).
    pub fn value(&self) -> Result<R> {
        match self.slot.lock().as_deref() {
            Some(b) => Ok((self.decode)(b)),
            None => Err(SquallError::Remote(
                "split-phase get not complete: call sync() first".into(),
            )),
        }
    }
}

/// A global pointer: an address in `node`'s symmetric memory. Copyable; pointer arithmetic
/// stays on the same node.
pub struct GlobalPtr<T> {
    node: NodeId,
    addr: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GlobalPtr<T> {}
impl<T> std::fmt::Debug for GlobalPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {:#x})", self.node, self.addr)
    }
}
impl<T> PartialEq for GlobalPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.node == o.node && self.addr == o.addr
    }
}

impl<T: Elem> GlobalPtr<T> {
    pub fn new(node: NodeId, addr: usize) -> Self {
        GlobalPtr {
            node,
            addr,
            _t: PhantomData,
        }
    }
    pub fn node(&self) -> NodeId {
        self.node
    }
    pub fn addr(&self) -> usize {
        self.addr
    }
    /// The pointer `n` elements further on the same node.
    pub fn add(&self, n: usize) -> Self {
        GlobalPtr::new(self.node, self.addr + n * T::SIZE)
    }
    /// The same address on another node (symmetric memory).
    pub fn on(&self, node: NodeId) -> Self {
        GlobalPtr::new(node, self.addr)
    }

    /// Blocking read.
    pub fn read(&self, g: &Gptr) -> Result<T> {
        let mut b = vec![0u8; T::SIZE];
        g.get(self.node, self.addr, &mut b)?;
        Ok(T::from_bytes(&b))
    }
    /// Blocking write: returns when applied at the target.
    pub fn write(&self, g: &Gptr, v: T) -> Result<()> {
        g.put(self.node, self.addr, &to_bytes(&[v]))
    }
    /// Split-phase get (Split-C `l := *g`): the value after `sync()`.
    pub fn get(&self, g: &Gptr) -> Result<Pending<T>> {
        self.get_bulk_with(g, 1, |b| T::from_bytes(b))
    }
    /// Split-phase put (Split-C `*g := v`): completed by `sync()`.
    pub fn put(&self, g: &Gptr, v: T) -> Result<()> {
        g.put_nb(self.node, self.addr, &to_bytes(&[v]))
    }
    /// One-way store (Split-C `*g :- v`): completed by `store_sync`/`all_store_sync`.
    pub fn store(&self, g: &Gptr, v: T) -> Result<()> {
        g.store(self.node, self.addr, &to_bytes(&[v]))
    }

    /// Blocking bulk read of `out.len()` elements.
    pub fn read_bulk(&self, g: &Gptr, out: &mut [T]) -> Result<()> {
        let mut b = vec![0u8; out.len() * T::SIZE];
        g.get(self.node, self.addr, &mut b)?;
        for (o, c) in out.iter_mut().zip(b.chunks_exact(T::SIZE)) {
            *o = T::from_bytes(c);
        }
        Ok(())
    }
    /// Blocking bulk write.
    pub fn write_bulk(&self, g: &Gptr, v: &[T]) -> Result<()> {
        g.put(self.node, self.addr, &to_bytes(v))
    }
    /// Split-phase bulk get of `n` elements (Split-C `bulk_get`).
    pub fn get_bulk(&self, g: &Gptr, n: usize) -> Result<Pending<Vec<T>>> {
        self.get_bulk_with(g, n, from_bytes::<T>)
    }
    /// Split-phase bulk put (Split-C `bulk_put`).
    pub fn put_bulk(&self, g: &Gptr, v: &[T]) -> Result<()> {
        g.put_nb(self.node, self.addr, &to_bytes(v))
    }
    /// One-way bulk store (Split-C `bulk_store`).
    pub fn store_bulk(&self, g: &Gptr, v: &[T]) -> Result<()> {
        g.store(self.node, self.addr, &to_bytes(v))
    }

    fn get_bulk_with<R>(&self, g: &Gptr, n: usize, decode: fn(&[u8]) -> R) -> Result<Pending<R>> {
        let slot = Arc::new(Mutex::new(None));
        let s = slot.clone();
        g.get_nb(
            self.node,
            self.addr,
            n * T::SIZE,
            Box::new(move |b: &[u8]| *s.lock() = Some(b.to_vec())),
        )?;
        Ok(Pending { slot, decode })
    }

    /// Remote atomic executed at the target (4- and 8-byte types); the old value.
    pub fn atomic(&self, g: &Gptr, kind: AtomicKind, a: T, b: T) -> Result<T> {
        let w = Width::from_bytes(T::SIZE as u64).map_err(SquallError::Gptr)?;
        g.atomic(self.node, self.addr, w, kind, a.to_bits(), b.to_bits())
            .map(T::from_bits)
    }
    pub fn fetch(&self, g: &Gptr) -> Result<T> {
        self.atomic(g, AtomicKind::Fetch, T::from_bits(0), T::from_bits(0))
    }
    pub fn fetch_add(&self, g: &Gptr, v: T) -> Result<T> {
        self.atomic(g, AtomicKind::Add, v, v)
    }
    pub fn swap(&self, g: &Gptr, v: T) -> Result<T> {
        self.atomic(g, AtomicKind::Swap, v, v)
    }
    /// Write `new` if the word equals `current`; the old value.
    pub fn compare_swap(&self, g: &Gptr, current: T, new: T) -> Result<T> {
        self.atomic(g, AtomicKind::CompareSwap, new, current)
    }
}

/// A spread array: `len` elements of `T` dealt to the nodes block-cyclically, `block`
/// elements at a time (block `b` on node `b mod N`), in the symmetric heap.
pub struct SpreadArray<T> {
    base: usize,
    len: usize,
    block: usize,
    nodes: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for SpreadArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SpreadArray<T> {}

impl<T: Elem> SpreadArray<T> {
    /// Collective: every node calls it with the same arguments.
    pub fn alloc(g: &Gptr, len: usize, block: usize) -> Result<Self> {
        let block = block.max(1);
        let nodes = usize::from(g.size().max(1));
        let per_node = len.div_ceil(block).div_ceil(nodes) * block * T::SIZE;
        let base = g.alloc(per_node.max(1), T::SIZE.max(16))?;
        Ok(SpreadArray {
            base,
            len,
            block,
            nodes,
            _t: PhantomData,
        })
    }
    /// Collective free.
    pub fn free(self, g: &Gptr) -> Result<()> {
        g.free(self.base)
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn block(&self) -> usize {
        self.block
    }
    /// The node holding element `i`.
    pub fn owner(&self, i: usize) -> NodeId {
        NodeId(((i / self.block) % self.nodes) as u16)
    }
    /// The global pointer of element `i` (panics if out of bounds).
    pub fn ptr(&self, i: usize) -> GlobalPtr<T> {
        assert!(
            i < self.len,
            "index {i} out of bounds of a spread array of {}",
            self.len
        );
        let b = i / self.block;
        let local = (b / self.nodes) * self.block + i % self.block;
        GlobalPtr::new(self.owner(i), self.base + local * T::SIZE)
    }
    /// The indices `node` holds, in order.
    pub fn indices_of(&self, node: NodeId) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).filter(move |&i| self.owner(i) == node)
    }
}
