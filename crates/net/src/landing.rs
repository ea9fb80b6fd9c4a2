//! A caller's buffer lent to the transport for the duration of one call, so that the body of
//! an expected message is read from the socket straight into it ([`Endpoint::receive_into`]:
//! a blocking one-sided get's reply lands in the caller's buffer, no copy on the way).
//!
//! Owns: the one pointer to borrowed memory the backend may hold ([`Dest`]) and the scope that
//! lends it ([`lend`]). Must not touch: frames, matching, sockets (the backend's).
//!
//! Soundness rests on one rule, kept by the endpoint: the `take_back` closure given to
//! [`lend`] removes every [`Dest`] it lent from wherever it was stored, under the same lock
//! as every use of it (the endpoint's driver lock), before `lend` returns (also when the call
//! panics). A [`Dest`] is never cloned; dropping one never touches the memory.
//!
//! [`Endpoint::receive_into`]: crate::Endpoint::receive_into
#![allow(unsafe_code)]

use std::io::{self, Read};
use std::ptr::NonNull;

/// A lent buffer: valid for writes of `len` bytes while it exists (see the module doc).
pub(crate) struct Dest {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Dest` stands for a `&mut [u8]` of its lender (which is `Send`); it is used only
// under the endpoint's driver lock, from whichever thread holds it.
unsafe impl Send for Dest {}

impl Dest {
    /// The buffer's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn slice_from(&mut self, at: usize) -> &mut [u8] {
        let at = at.min(self.len);
        // SAFETY: `ptr..ptr+len` is the lender's `&mut [u8]`, exclusively ours while this
        // `Dest` exists (module doc); `at <= len`; `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), self.len - at) }
    }

    /// Copies `src` to `at..` (as much as fits); the bytes copied.
    pub(crate) fn write_at(&mut self, at: usize, src: &[u8]) -> usize {
        let room = self.slice_from(at);
        let n = room.len().min(src.len());
        room[..n].copy_from_slice(&src[..n]);
        n
    }

    /// One `read` from `r` into `at..`.
    pub(crate) fn read_at(&mut self, at: usize, r: &mut impl Read) -> io::Result<usize> {
        r.read(self.slice_from(at))
    }

    /// The first `n` bytes (those written so far).
    pub(crate) fn prefix(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.len);
        &self.slice_from(0)[..n]
    }
}

/// Lends `buf` as a [`Dest`] to `store` (which keeps it where the backend finds it), runs `f`,
/// then calls `take_back`, which must remove the `Dest` again (module doc), also if `f`
/// panics. Returns what `f` returned.
pub(crate) fn lend<R>(
    buf: &mut [u8],
    store: impl FnOnce(Dest),
    f: impl FnOnce() -> R,
    take_back: impl FnOnce(),
) -> R {
    struct Back<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Back<F> {
        fn drop(&mut self) {
            if let Some(t) = self.0.take() {
                t();
            }
        }
    }
    let back = Back(Some(take_back));
    store(Dest {
        ptr: NonNull::from(&mut *buf).cast(),
        len: buf.len(),
    });
    let r = f();
    drop(back);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_buffer_is_written_through_and_taken_back() {
        let mut buf = vec![0u8; 8];
        let slot = std::sync::Mutex::new(None::<Dest>);
        let n = lend(
            &mut buf,
            |d| *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(d),
            || {
                let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
                let d = g.as_mut().map(|d| {
                    let a = d.write_at(0, &[1, 2, 3]);
                    let b = d.read_at(3, &mut &[4u8, 5, 6, 7, 8, 9][..]).unwrap_or(0);
                    a + b
                });
                d.unwrap_or(0)
            },
            || {
                slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            },
        );
        assert_eq!(n, 8);
        assert!(slot.lock().unwrap_or_else(|e| e.into_inner()).is_none());
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
