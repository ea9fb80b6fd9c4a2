//! `SharedArray<T>`: a typed, bounds-checked view of Squall memory for Rust programs, so that
//! ordinary code reads and writes shared data without `unsafe`. Accesses are plain (volatile)
//! loads and stores through the application view: they fault and stay coherent like any
//! other access, and their ordering across nodes comes from synchronization, as in C.
//!
//! Owns: the view type. Must not touch protocol state.
use std::marker::PhantomData;

/// Plain-old-data element types a `SharedArray` may hold (any bit pattern is a valid value).
pub trait Pod: Copy + Send + Sync + 'static {}
macro_rules! pod {
    ($($t:ty),*) => { $(impl Pod for $t {})* };
}
pod!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

/// `len` elements of `T` at a Squall address (the same on every node). Copyable; every copy
/// on every node names the same memory.
#[derive(Debug)]
pub struct SharedArray<T: Pod> {
    addr: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Pod> Clone for SharedArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Pod> Copy for SharedArray<T> {}

impl<T: Pod> SharedArray<T> {
    /// # Safety
    /// `addr` must be the start of a live Squall allocation of at least `len` elements of `T`,
    /// aligned for `T`, that stays allocated while the array is used.
    pub(crate) unsafe fn from_raw(addr: usize, len: usize) -> Self {
        SharedArray {
            addr,
            len,
            _t: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first element (valid on every node).
    pub fn as_ptr(&self) -> *mut T {
        self.addr as *mut T
    }

    fn slot(&self, i: usize) -> *mut T {
        assert!(
            i < self.len,
            "index {i} out of bounds of a shared array of {}",
            self.len
        );
        (self.addr + i * std::mem::size_of::<T>()) as *mut T
    }

    /// Read element `i` (panics if out of bounds).
    pub fn get(&self, i: usize) -> T {
        // SAFETY: `slot` checked the bound; the allocation is live and aligned (from_raw's
        // contract) and any bit pattern is a valid `T` (Pod).
        unsafe { self.slot(i).read_volatile() }
    }

    /// Write element `i` (panics if out of bounds).
    pub fn set(&self, i: usize, v: T) {
        // SAFETY: as in `get`.
        unsafe { self.slot(i).write_volatile(v) }
    }

    /// Copy `out.len()` elements starting at `start` into `out`.
    pub fn read_into(&self, start: usize, out: &mut [T]) {
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.get(start + k);
        }
    }

    /// Write `src` starting at element `start`.
    pub fn write_from(&self, start: usize, src: &[T]) {
        for (k, v) in src.iter().enumerate() {
            self.set(start + k, *v);
        }
    }

    /// Set every element to `v`.
    pub fn fill(&self, v: T) {
        for i in 0..self.len {
            self.set(i, v);
        }
    }
}
