//! The entry points behind `include/squall/atomic.h`: every atomic operation the header
//! redirects (C11 <stdatomic.h>, GCC `__atomic_*` / `__sync_*`, libstdc++'s std::atomic) lands
//! in [`squall_atomic_op`] or [`squall_atomic_fence`].
//!
//! An address in Squall memory is executed at its page's home by `Node::atomic_ordered` with
//! its C11 order; any other address (private data) by the CPU's own atomic instruction. An
//! operation that cannot be made correct (an object in Squall memory of a width other than 1,
//! 2, 4 or 8 bytes, or misaligned) ends the program with a message naming the operation and
//! the address: a wrong value must never be returned silently.
//!
//! Owns: the C operation codes and the native fallback. Must not touch: protocol internals.
use squall::{AtomicOp, MemOrder};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// `SQUALL_ATOMIC_*` codes of `include/squall/atomic.h`.
pub(crate) const ADD: u32 = 0;
pub(crate) const SUB: u32 = 1;
pub(crate) const AND: u32 = 2;
pub(crate) const OR: u32 = 3;
pub(crate) const XOR: u32 = 4;
pub(crate) const NAND: u32 = 5;
pub(crate) const XCHG: u32 = 6;
pub(crate) const CAS: u32 = 7;
pub(crate) const LOAD: u32 = 8;
pub(crate) const STORE: u32 = 9;

/// End the program: an atomic operation that cannot be made correct.
fn refuse(what: *const c_char, addr: usize, width: u32, why: &str) -> ! {
    let what = if what.is_null() {
        "atomic operation".into()
    } else {
        // SAFETY: the header passes a string literal.
        unsafe { CStr::from_ptr(what) }.to_string_lossy()
    };
    let me = squall::node()
        .map(|n| n.rank().to_string())
        .unwrap_or_else(|_| "squall".into());
    eprintln!(
        "squall: {me}: {what} on the {width}-byte object at {addr:#x}: {why}; ending the program"
    );
    std::process::abort()
}

/// The operation as the home executes it.
fn home_op(op: u32, value: u64, expected: u64) -> Option<AtomicOp> {
    Some(match op {
        ADD => AtomicOp::FetchAdd(value),
        SUB => AtomicOp::FetchAdd(value.wrapping_neg()),
        AND => AtomicOp::And(value),
        OR => AtomicOp::Or(value),
        XOR => AtomicOp::Xor(value),
        NAND => AtomicOp::Nand(value),
        XCHG | STORE => AtomicOp::Swap(value),
        CAS => AtomicOp::CompareSwap {
            expected,
            new: value,
        },
        LOAD => AtomicOp::Load,
        _ => return None,
    })
}

/// Orders std accepts for a load, a store and a compare-exchange failure.
fn load_order(o: Ordering) -> Ordering {
    match o {
        Ordering::Release => Ordering::Relaxed,
        Ordering::AcqRel => Ordering::Acquire,
        o => o,
    }
}
fn store_order(o: Ordering) -> Ordering {
    match o {
        Ordering::Acquire => Ordering::Relaxed,
        Ordering::AcqRel => Ordering::Release,
        o => o,
    }
}

fn std_order(o: MemOrder) -> Ordering {
    match o {
        MemOrder::Relaxed => Ordering::Relaxed,
        MemOrder::Consume | MemOrder::Acquire => Ordering::Acquire,
        MemOrder::Release => Ordering::Release,
        MemOrder::AcqRel => Ordering::AcqRel,
        MemOrder::SeqCst => Ordering::SeqCst,
    }
}

/// The CPU's atomic on private memory.
macro_rules! native {
    ($A:ty, $T:ty, $addr:expr, $op:expr, $v:expr, $e:expr, $o:expr) => {{
        // SAFETY: the caller's object is `width` bytes at an address aligned to `width`
        // (checked), valid for atomic access (the program applied an atomic to it).
        let a = unsafe { <$A>::from_ptr($addr as *mut $T) };
        let (v, e, o) = ($v as $T, $e as $T, $o);
        (match $op {
            ADD => a.fetch_add(v, o),
            SUB => a.fetch_sub(v, o),
            AND => a.fetch_and(v, o),
            OR => a.fetch_or(v, o),
            XOR => a.fetch_xor(v, o),
            NAND => a.fetch_nand(v, o),
            XCHG => a.swap(v, o),
            CAS => match a.compare_exchange(e, v, o, load_order(o)) {
                Ok(x) | Err(x) => x,
            },
            LOAD => a.load(load_order(o)),
            _ => {
                a.store(v, store_order(o));
                0
            }
        }) as u64
    }};
}

/// Execute atomic operation `op` (a `SQUALL_ATOMIC_*` code) on the `width`-byte object at
/// `addr` with C11 order `order` (`__ATOMIC_*`); `value` is the operand (the desired value of
/// a compare-exchange), `expected` the compared value. Returns the object's old value,
/// zero-extended. `what` names the operation in a refusal message. Used by
/// `squall/atomic.h`; not meant to be called directly.
///
/// # Safety
/// `addr` points to a `width`-byte object valid for atomic access; `what` is null or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn squall_atomic_op(
    addr: *mut c_void,
    width: u32,
    op: u32,
    value: u64,
    expected: u64,
    order: c_int,
    what: *const c_char,
) -> u64 {
    let a = addr as usize;
    let w = width as usize;
    let Some(mo) = MemOrder::from_c(order) else {
        refuse(what, a, width, &format!("unknown memory order {order}"))
    };
    let Some(hop) = home_op(op, value, expected) else {
        refuse(what, a, width, &format!("unknown operation code {op}"))
    };
    let node = squall::node().ok().filter(|n| n.is_shared(a));
    if !matches!(width, 1 | 2 | 4 | 8) {
        let why = if node.is_some() {
            "Squall executes atomics on objects of 1, 2, 4 or 8 bytes only"
        } else {
            "atomics on objects of other sizes than 1, 2, 4 or 8 bytes are not supported under squall-pthread"
        };
        refuse(what, a, width, why)
    }
    if !a.is_multiple_of(w) {
        refuse(what, a, width, "the object is not aligned to its size")
    }
    match node {
        // On the private stack: the call takes the node's service lock, and a fault on a
        // shared stack page (e.g. in an allocation the home's execution makes) could not be
        // served while this thread holds it (an OpenMP reduction deadlocked that way).
        Some(n) => match crate::stack::on_private(|| n.atomic_ordered(a, width as u8, hop, mo)) {
            Ok(old) => old,
            Err(e) => refuse(what, a, width, &e.to_string()),
        },
        None => {
            let o = std_order(mo);
            match width {
                1 => native!(AtomicU8, u8, a, op, value, expected, o),
                2 => native!(AtomicU16, u16, a, op, value, expected, o),
                4 => native!(AtomicU32, u32, a, op, value, expected, o),
                _ => native!(AtomicU64, u64, a, op, value, expected, o),
            }
        }
    }
}

/// A fence with C11 order `order` (`atomic_thread_fence`, `__sync_synchronize`): see
/// `Node::fence` for what it orders across nodes. Used by `squall/atomic.h`.
#[no_mangle]
pub extern "C" fn squall_atomic_fence(order: c_int) {
    let mo = MemOrder::from_c(order).unwrap_or(MemOrder::SeqCst);
    match squall::node() {
        Ok(n) => {
            if let Err(e) = crate::stack::on_private(|| n.fence(mo)) {
                eprintln!(
                    "squall: {}: atomic fence: {e}; ending the program",
                    n.rank()
                );
                std::process::abort()
            }
        }
        Err(_) if mo == MemOrder::Relaxed => {}
        Err(_) => std::sync::atomic::fence(std_order(mo)),
    }
}
