//! The libatomic entry points GCC calls for the atomic operations it does not inline: with
//! `-fno-inline-atomics` (in the squall-pthread pkg-config line) the operator forms on `_Atomic`
//! objects (`x++`, `x += v`, `x = v`, reading `x`, compound assignments done as a
//! compare-exchange loop) become calls to `__atomic_load_8`, `__atomic_fetch_add_4`, ... These
//! definitions (1, 2, 4 and 8 bytes) send them to [`squall_atomic_op`], so they are correct
//! across nodes like the function forms `squall/atomic.h` redirects; private addresses get the
//! CPU's atomic. Sizes without a definition here (16 bytes, the generic `__atomic_load(size,
//! ...)` forms) fail to link unless the program links libatomic itself, and then are not
//! correct across nodes (documented in docs/memory-model.md).
//!
//! Owns: the libatomic ABI names. Must not touch: anything but `squall_atomic_op`.
#![allow(clippy::missing_safety_doc)]
use crate::atomic::{squall_atomic_op, ADD, AND, CAS, LOAD, NAND, OR, STORE, SUB, XCHG, XOR};
use std::ffi::{c_int, c_void};

macro_rules! libatomic {
    ($t:ty, $w:expr, $load:ident, $store:ident, $xchg:ident, $cas:ident,
     [$($fetch:ident = $fop:ident),*], [$($opf:ident = $oop:ident),*]) => {
        /// libatomic ABI: atomic load.
        #[no_mangle]
        pub unsafe extern "C" fn $load(ptr: *const c_void, order: c_int) -> $t {
            // SAFETY: the compiler passes the object's address.
            unsafe { squall_atomic_op(ptr as *mut c_void, $w, LOAD, 0, 0, order, c"_Atomic load".as_ptr()) as $t }
        }
        /// libatomic ABI: atomic store.
        #[no_mangle]
        pub unsafe extern "C" fn $store(ptr: *mut c_void, v: $t, order: c_int) {
            // SAFETY: as above.
            unsafe { squall_atomic_op(ptr, $w, STORE, v as u64, 0, order, c"_Atomic store".as_ptr()) };
        }
        /// libatomic ABI: atomic exchange.
        #[no_mangle]
        pub unsafe extern "C" fn $xchg(ptr: *mut c_void, v: $t, order: c_int) -> $t {
            // SAFETY: as above.
            unsafe { squall_atomic_op(ptr, $w, XCHG, v as u64, 0, order, c"_Atomic exchange".as_ptr()) as $t }
        }
        /// libatomic ABI: compare-exchange (never fails spuriously); `*expected` gets the
        /// current value when it fails.
        #[no_mangle]
        pub unsafe extern "C" fn $cas(
            ptr: *mut c_void,
            expected: *mut c_void,
            desired: $t,
            _weak: bool,
            success: c_int,
            _failure: c_int,
        ) -> bool {
            let e = expected as *mut $t;
            // SAFETY: the compiler passes the object's address and a valid expected value.
            unsafe {
                let want = e.read();
                let old = squall_atomic_op(ptr, $w, CAS, desired as u64, want as u64, success,
                    c"_Atomic compare-exchange".as_ptr()) as $t;
                if old == want {
                    true
                } else {
                    e.write(old);
                    false
                }
            }
        }
        $(
            /// libatomic ABI: fetch-and-operate (returns the old value).
            #[no_mangle]
            pub unsafe extern "C" fn $fetch(ptr: *mut c_void, v: $t, order: c_int) -> $t {
                // SAFETY: as above.
                unsafe { squall_atomic_op(ptr, $w, $fop, v as u64, 0, order, c"_Atomic read-modify-write".as_ptr()) as $t }
            }
        )*
        $(
            /// libatomic ABI: operate-and-fetch (returns the new value).
            #[no_mangle]
            pub unsafe extern "C" fn $opf(ptr: *mut c_void, v: $t, order: c_int) -> $t {
                // SAFETY: as above.
                let old = unsafe { squall_atomic_op(ptr, $w, $oop, v as u64, 0, order, c"_Atomic read-modify-write".as_ptr()) as $t };
                match $oop {
                    ADD => old.wrapping_add(v),
                    SUB => old.wrapping_sub(v),
                    AND => old & v,
                    OR => old | v,
                    XOR => old ^ v,
                    _ => !(old & v),
                }
            }
        )*
    };
}

libatomic!(
    u8,
    1,
    __atomic_load_1,
    __atomic_store_1,
    __atomic_exchange_1,
    __atomic_compare_exchange_1,
    [
        __atomic_fetch_add_1 = ADD,
        __atomic_fetch_sub_1 = SUB,
        __atomic_fetch_and_1 = AND,
        __atomic_fetch_or_1 = OR,
        __atomic_fetch_xor_1 = XOR,
        __atomic_fetch_nand_1 = NAND
    ],
    [
        __atomic_add_fetch_1 = ADD,
        __atomic_sub_fetch_1 = SUB,
        __atomic_and_fetch_1 = AND,
        __atomic_or_fetch_1 = OR,
        __atomic_xor_fetch_1 = XOR,
        __atomic_nand_fetch_1 = NAND
    ]
);
libatomic!(
    u16,
    2,
    __atomic_load_2,
    __atomic_store_2,
    __atomic_exchange_2,
    __atomic_compare_exchange_2,
    [
        __atomic_fetch_add_2 = ADD,
        __atomic_fetch_sub_2 = SUB,
        __atomic_fetch_and_2 = AND,
        __atomic_fetch_or_2 = OR,
        __atomic_fetch_xor_2 = XOR,
        __atomic_fetch_nand_2 = NAND
    ],
    [
        __atomic_add_fetch_2 = ADD,
        __atomic_sub_fetch_2 = SUB,
        __atomic_and_fetch_2 = AND,
        __atomic_or_fetch_2 = OR,
        __atomic_xor_fetch_2 = XOR,
        __atomic_nand_fetch_2 = NAND
    ]
);
libatomic!(
    u32,
    4,
    __atomic_load_4,
    __atomic_store_4,
    __atomic_exchange_4,
    __atomic_compare_exchange_4,
    [
        __atomic_fetch_add_4 = ADD,
        __atomic_fetch_sub_4 = SUB,
        __atomic_fetch_and_4 = AND,
        __atomic_fetch_or_4 = OR,
        __atomic_fetch_xor_4 = XOR,
        __atomic_fetch_nand_4 = NAND
    ],
    [
        __atomic_add_fetch_4 = ADD,
        __atomic_sub_fetch_4 = SUB,
        __atomic_and_fetch_4 = AND,
        __atomic_or_fetch_4 = OR,
        __atomic_xor_fetch_4 = XOR,
        __atomic_nand_fetch_4 = NAND
    ]
);
libatomic!(
    u64,
    8,
    __atomic_load_8,
    __atomic_store_8,
    __atomic_exchange_8,
    __atomic_compare_exchange_8,
    [
        __atomic_fetch_add_8 = ADD,
        __atomic_fetch_sub_8 = SUB,
        __atomic_fetch_and_8 = AND,
        __atomic_fetch_or_8 = OR,
        __atomic_fetch_xor_8 = XOR,
        __atomic_fetch_nand_8 = NAND
    ],
    [
        __atomic_add_fetch_8 = ADD,
        __atomic_sub_fetch_8 = SUB,
        __atomic_and_fetch_8 = AND,
        __atomic_or_fetch_8 = OR,
        __atomic_xor_fetch_8 = XOR,
        __atomic_nand_fetch_8 = NAND
    ]
);
