//! The ring protocol of the MPI backend's shared-memory transport ([`super::mpi_shm`]): one
//! writer and one reader exchange messages of any size through a ring in memory both can
//! reach (in Squall, a rank's segment of an MPI-3 shared-memory window). A message is one
//! record: a 16-byte header (stamp, length, tag), then its bytes, padded to 16. The writer
//! writes a record that fits *whole* and then stores its stamp (its stream position + 1)
//! with release; the reader polls the stamp of the next record, so each message moves one
//! cache line each way. A record larger than the free room is *streamed*: its stamp goes
//! first, its bytes follow as the reader frees room, published through the writer's cursor.
//! The reader publishes how far it has read through its own cursor. Before a record is
//! published, the stamp slot of the record after it is cleared, so old bytes there (a payload
//! a lap ago could hold anything) are never taken for a stamp.
//!
//! Owns the ring layout and this protocol, and nothing else: no MPI, no frames, no choice of
//! what goes where. Pure memory logic, so its tests run without MPI; the caller provides the
//! memory and makes each end single (in Squall, the backend's MPI lock).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of data in one ring at most; rings shrink (to [`MIN_RING_BYTES`]) as more ranks share
/// a machine: see [`ring_bytes`].
pub(crate) const MAX_RING_BYTES: usize = 512 * 1024;
/// Bytes of data in one ring at least.
pub(crate) const MIN_RING_BYTES: usize = 16 * 1024;
/// A rank's rings together hold about this much (so 128 ranks on a machine use 32 KiB rings,
/// 512 MiB for the machine, where 512 KiB rings would take 8 GiB).
const RINGS_BUDGET: usize = 4 * 1024 * 1024;

/// The data size of each of a rank's `rings` rings: a power of two between the bounds.
pub(crate) fn ring_bytes(rings: usize) -> usize {
    let share = RINGS_BUDGET / rings.max(1);
    let pow = if share.is_power_of_two() {
        share
    } else {
        share.next_power_of_two() / 2
    };
    pow.clamp(MIN_RING_BYTES, MAX_RING_BYTES)
}

/// The bytes one ring of `cap` data bytes takes (cursors and data).
pub(crate) fn slot(cap: usize) -> usize {
    CTRL + cap
}
/// The cursors: the writer's position at offset 0, the reader's at 64 (own cache lines).
const CTRL: usize = 128;
/// Record header: stamp (u64: the record's stream position + 1, stored last with release),
/// length (u32), tag (i32). Records start at multiples of this size, so a record header never
/// wraps around the ring's end.
const REC: usize = 16;
/// Header flag (top bit of the length word): the record was written whole before its stamp.
/// Without it, the record is *streamed*: its stamp goes first and its bytes follow as room
/// frees up, published through the writer's cursor.
const WHOLE: u32 = 1 << 31;
/// A streamed record publishes the writer's cursor at least every this many bytes, so the
/// reader copies out while the writer copies in.
const CHUNK: usize = 32 * 1024;
/// The writer clears stamp slots this far ahead of its cursor, after publishing a record
/// (when less than half of it is left): clearing the next record's slot just before
/// publishing would put a cache-line fetch in front of every other stamp store.
const AHEAD: u64 = 1024;

fn padded(len: usize) -> usize {
    len.div_ceil(REC) * REC
}

/// One ring: its cursors and data, at `base` in some rank's segment of the window.
///
/// Why stamps: a reader that polled the writer's cursor and then read the record would move
/// two cache lines from the writer's core per message, and the writer would take both back;
/// polling the stamp in the record itself moves one line each way, the least a message can.
#[derive(Clone, Copy)]
pub(crate) struct Ring {
    base: *mut u8,
    /// Bytes of data (a power of two, a multiple of [`REC`]).
    cap: usize,
}

impl Ring {
    /// The ring at `base` with `cap` bytes of data (a power of two, at least
    /// [`MIN_RING_BYTES`]).
    ///
    /// # Safety
    /// `base` must be 64-byte aligned and valid for reads and writes of [`slot`]`(cap)` bytes
    /// for as long as the ring, its writer or its reader is used; its cursors (the first
    /// [`CTRL`] bytes) and the data's stamps must start zeroed; at most one [`Writer`] and one
    /// [`Reader`] use it at a time.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Ring {
        debug_assert!(cap.is_power_of_two() && cap >= MIN_RING_BYTES);
        Ring { base, cap }
    }

    /// The writer's cursor (bytes ever written; published for streamed records only).
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: `base` points at a live, 64-byte-aligned ring (the contract of `Ring::new`);
        // the cursor is only accessed atomically.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    /// The reader's cursor (bytes ever read).
    fn head(&self) -> &AtomicU64 {
        // SAFETY: as in `tail`, 64 bytes further on.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the data follow the cursors inside the ring (`slot(cap)` bytes).
        unsafe { self.base.add(CTRL) }
    }

    /// The stamp of the record at stream position `pos` (a multiple of [`REC`]).
    fn stamp(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: `pos % self.cap` is a multiple of 16 below `self.cap`, so the 8 bytes lie
        // inside the data and are 8-byte aligned; stamps are only accessed atomically.
        unsafe { &*(self.data().add((pos as usize) % self.cap) as *const AtomicU64) }
    }

    /// The length word and tag of the record at `pos` (written before its stamp).
    fn header(&self, pos: u64) -> (u32, i32) {
        let at = (pos as usize) % self.cap;
        // SAFETY: a record header lies inside the data (`at` is a multiple of 16 below
        // `self.cap`), 4-byte aligned; the writer wrote it before the stamp the caller loaded
        // with acquire.
        unsafe {
            let p = self.data().add(at + 8);
            (
                u32::from_le(std::ptr::read(p as *const u32)),
                i32::from_le(std::ptr::read(p.add(4) as *const i32)),
            )
        }
    }

    /// Writes the length word and tag of the record at `pos` (before its stamp).
    fn set_header(&self, pos: u64, word: u32, tag: i32) {
        let at = (pos as usize) % self.cap;
        // SAFETY: as in `header`; the writer owns the record until it stores the stamp.
        unsafe {
            let p = self.data().add(at + 8);
            std::ptr::write(p as *mut u32, word.to_le());
            std::ptr::write(p.add(4) as *mut i32, tag.to_le());
        }
    }

    /// Copies `src` into the ring at stream position `pos` (wrapping at the end).
    fn put(&self, pos: u64, src: &[u8]) {
        let at = (pos as usize) % self.cap;
        let first = src.len().min(self.cap - at);
        // SAFETY: both ranges lie inside the ring's data (`at + first <= self.cap`, the rest
        // from 0, `src.len() <= self.cap`); the writer owns them until it publishes them
        // (the reader has published `head` past their previous contents).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data().add(at), first);
            if first < src.len() {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr().add(first),
                    self.data(),
                    src.len() - first,
                );
            }
        }
    }

    /// Copies `dst.len()` bytes from stream position `pos` (wrapping at the end).
    fn get(&self, pos: u64, dst: &mut [u8]) {
        let at = (pos as usize) % self.cap;
        let first = dst.len().min(self.cap - at);
        // SAFETY: as in `put`; the writer published these bytes (a stamp or the cursor, loaded
        // with acquire by the caller) and does not touch them until the reader publishes
        // `head` past them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(at), dst.as_mut_ptr(), first);
            if first < dst.len() {
                std::ptr::copy_nonoverlapping(
                    self.data(),
                    dst.as_mut_ptr().add(first),
                    dst.len() - first,
                );
            }
        }
    }

    /// Appends `n` bytes from stream position `pos` to `buf` (within its spare capacity).
    fn get_into(&self, pos: u64, buf: &mut Vec<u8>, n: usize) {
        buf.reserve(n);
        let at = buf.len();
        // SAFETY: `reserve` made room for `n` more bytes; `get` writes all of them before the
        // length covers them, and `u8` has no invalid values.
        unsafe {
            let spare = std::slice::from_raw_parts_mut(buf.as_mut_ptr().add(at), n);
            self.get(pos, spare);
            buf.set_len(at + n);
        }
    }

    /// The `len` bytes at stream position `pos` in place, if they do not wrap.
    fn slice(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let at = (pos as usize) % self.cap;
        (at + len <= self.cap).then(|| {
            // SAFETY: inside the ring's data; published by the writer (see `get`), and the
            // borrow ends before the reader publishes `head` past it.
            unsafe { std::slice::from_raw_parts(self.data().add(at), len) }
        })
    }
}

/// The writing end of a ring.
pub(crate) struct Writer {
    ring: Ring,
    /// Bytes written.
    tail: u64,
    /// The reader's cursor as last seen.
    head: u64,
    /// Every stamp slot from `tail` up to here is zero (the memory starts zeroed).
    cleared: u64,
}

impl Writer {
    pub(crate) fn new(ring: Ring) -> Writer {
        Writer {
            ring,
            tail: 0,
            head: 0,
            cleared: ring.cap as u64,
        }
    }

    /// Zeroes the stamp slots from `from` (or where clearing stopped, if further) up to
    /// `upto`, which must be free room (`upto <= head + self.ring.cap`). Only slots that lie
    /// wholly below `upto` are cleared: while a streamed record is read, the reader's cursor
    /// (and so the end of the free room) can be at any byte, and the byte there is unread.
    fn clear(&mut self, from: u64, upto: u64) {
        let upto = upto & !(REC as u64 - 1);
        let mut q = from.max(self.cleared);
        while q < upto {
            self.ring.stamp(q).store(0, Ordering::Relaxed);
            q += REC as u64;
        }
        self.cleared = self.cleared.max(upto);
    }

    /// Clears ahead of the cursor after a record went out (see [`AHEAD`]).
    fn clear_ahead(&mut self) {
        if self.cleared < self.tail + AHEAD / 2 {
            let upto = (self.tail + AHEAD).min(self.head + self.ring.cap as u64);
            self.clear(self.tail, upto);
        }
    }

    /// The free bytes, looking at the reader's cursor only when the last one seen leaves
    /// fewer than `need`.
    fn free_for(&mut self, need: usize) -> usize {
        let free = self.ring.cap - (self.tail - self.head) as usize;
        if free >= need {
            return free;
        }
        self.head = self.ring.head().load(Ordering::Acquire);
        self.ring.cap - (self.tail - self.head) as usize
    }

    /// True if `need` bytes are free (see [`Writer::free_for`]).
    fn room(&mut self, need: usize) -> bool {
        self.free_for(need) >= need
    }

    /// Appends one message (`parts` one after the other) with `tag`: whole, if it fits now,
    /// else streamed. While the ring is full, publishes what is written and calls `wait`;
    /// gives up (false, the ring is then unusable) when `wait` returns false.
    pub(crate) fn write(
        &mut self,
        tag: i32,
        parts: &[&[u8]],
        wait: &mut dyn FnMut() -> bool,
    ) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let Some(word) = u32::try_from(len).ok().filter(|l| l & WHOLE == 0) else {
            return false;
        };
        let pos = self.tail;
        let total = (REC + padded(len)) as u64;
        if self.room(REC + padded(len) + REC) {
            let mut at = pos + REC as u64;
            for p in parts.iter().filter(|p| !p.is_empty()) {
                self.ring.put(at, p);
                at += p.len() as u64;
            }
            self.ring.set_header(pos, word | WHOLE, tag);
            // The next record's stamp slot holds old bytes (a payload a lap ago could hold
            // anything): it must be zero before this record is published, so the reader
            // never mistakes them for a stamp. Usually it was cleared ahead already.
            self.clear(pos + total, pos + total + REC as u64);
            self.ring.stamp(pos).store(pos + 1, Ordering::Release);
            self.tail += total;
            self.clear_ahead();
            return true;
        }
        while !self.room(REC) {
            if !wait() {
                return false;
            }
        }
        self.ring.set_header(pos, word, tag);
        self.ring.stamp(pos).store(pos + 1, Ordering::Release);
        self.tail += REC as u64;
        // The stream position after this record. Until the next record's stamp slot is
        // cleared (as for a whole record), the cursor stays short of it, so the reader cannot
        // finish this record and look at that slot.
        let end = pos + total;
        let mut parts = parts.iter().copied().filter(|p| !p.is_empty());
        let mut piece = parts.next();
        let mut off = 0;
        while self.tail < end {
            let free = self.free_for(1);
            if free == 0 {
                self.ring
                    .tail()
                    .store(self.tail.min(end - 1), Ordering::Release);
                if !wait() {
                    return false;
                }
                continue;
            }
            let n = match piece {
                Some(p) => {
                    let n = free.min(p.len() - off).min(CHUNK);
                    self.ring.put(self.tail, &p[off..off + n]);
                    off += n;
                    if off == p.len() {
                        piece = parts.next();
                        off = 0;
                    }
                    n
                }
                // The padding: nothing to write.
                None => free.min((end - self.tail) as usize),
            };
            self.tail += n as u64;
            self.ring
                .tail()
                .store(self.tail.min(end - 1), Ordering::Release);
        }
        while self.cleared <= end && !self.room(REC) {
            if !wait() {
                return false;
            }
        }
        self.clear(end, end + REC as u64);
        self.ring.tail().store(end, Ordering::Release);
        self.clear_ahead();
        true
    }
}

/// A message taken off a ring: in place (up to the reader's copy limit, not wrapping) or
/// gathered into a buffer of its own.
pub(crate) enum Msg<'a> {
    Here(&'a [u8]),
    Owned(Vec<u8>),
}

/// A streamed message being gathered piece by piece.
struct Partial {
    tag: i32,
    len: usize,
    buf: Vec<u8>,
}

/// The reading end of a ring.
pub(crate) struct Reader {
    /// Who writes the ring (the writer's rank in `MPI_COMM_WORLD`).
    pub(crate) src: i32,
    ring: Ring,
    head: u64,
    partial: Option<Partial>,
    /// Tests only: the most bytes of a streamed record taken per call, so a reader can stop
    /// anywhere in a stream (as a preempted one would).
    #[cfg(test)]
    step: usize,
}

impl Reader {
    pub(crate) fn new(src: i32, ring: Ring) -> Reader {
        Reader {
            src,
            ring,
            head: 0,
            partial: None,
            #[cfg(test)]
            step: usize::MAX,
        }
    }

    /// Takes the next message if it has arrived whole (gathering the pieces of a streamed one
    /// meanwhile), hands it to `f` with its tag, and frees its room. Messages of at most
    /// `copy_max` bytes that do not wrap are handed over in place. False if none was whole.
    pub(crate) fn next(&mut self, copy_max: usize, f: &mut dyn FnMut(i32, Msg<'_>)) -> bool {
        if self.partial.is_none() {
            if self.ring.stamp(self.head).load(Ordering::Acquire) != self.head + 1 {
                return false;
            }
            let (word, tag) = self.ring.header(self.head);
            let len = (word & !WHOLE) as usize;
            let body = self.head + REC as u64;
            if word & WHOLE != 0 {
                match self.ring.slice(body, len).filter(|_| len <= copy_max) {
                    Some(s) => f(tag, Msg::Here(s)),
                    None => {
                        let mut v = Vec::with_capacity(len);
                        self.ring.get_into(body, &mut v, len);
                        f(tag, Msg::Owned(v));
                    }
                }
                self.head = body + padded(len) as u64;
                self.ring.head().store(self.head, Ordering::Release);
                return true;
            }
            self.head = body;
            self.partial = Some(Partial {
                tag,
                len,
                buf: Vec::with_capacity(len),
            });
        }
        let Some(p) = self.partial.as_mut() else {
            return false;
        };
        let tail = self.ring.tail().load(Ordering::Acquire);
        let n = (tail.saturating_sub(self.head) as usize).min(p.len - p.buf.len());
        #[cfg(test)]
        let n = n.min(self.step);
        if n > 0 {
            self.ring.get_into(self.head, &mut p.buf, n);
            self.head += n as u64;
        }
        let pad = padded(p.len) - p.len;
        // Whole once the writer has published the record's end, which it does only after
        // clearing the next record's stamp slot (so for a zero-length record too, whose bytes
        // are all "here" at once).
        let whole = p.buf.len() == p.len && tail >= self.head + pad as u64;
        if whole {
            self.head += pad as u64;
        }
        if n > 0 || whole {
            self.ring.head().store(self.head, Ordering::Release);
        }
        if !whole {
            return false;
        }
        let Some(p) = self.partial.take() else {
            return false;
        };
        f(p.tag, Msg::Owned(p.buf));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[repr(C, align(64))]
    struct Line([u8; 64]);

    const RING_BYTES: usize = MAX_RING_BYTES;

    /// Zeroed, 64-byte-aligned memory for one ring of `cap` bytes.
    fn memory(cap: usize) -> Vec<Line> {
        (0..slot(cap) / 64).map(|_| Line([0; 64])).collect()
    }

    fn ring(mem: &mut [Line], cap: usize) -> Ring {
        // SAFETY: `mem` is zeroed, aligned, `slot(cap)` bytes, and outlives the ring in each
        // test.
        unsafe { Ring::new(mem.as_mut_ptr().cast(), cap) }
    }

    /// A size: mostly small, some a few KiB, a few larger than the whole ring of `cap` bytes.
    fn size(rng: &mut ChaCha8Rng, cap: usize) -> usize {
        match rng.gen_range(0..100) {
            0..=69 => rng.gen_range(0..200),
            70..=94 => rng.gen_range(200..20_000),
            _ => rng.gen_range(cap / 2..cap * 3),
        }
    }

    fn take_all(r: &mut Reader, got: &mut Vec<(i32, Vec<u8>)>, here: &mut usize) {
        while r.next(1024, &mut |tag, m| match m {
            Msg::Here(d) => {
                *here += 1;
                got.push((tag, d.to_vec()));
            }
            Msg::Owned(v) => got.push((tag, v)),
        }) {}
    }

    /// [`take_all`], half the time stopping in a streamed record after a random number of its
    /// bytes (at any byte, as a preempted reader would).
    fn take_some(
        r: &mut Reader,
        got: &mut Vec<(i32, Vec<u8>)>,
        here: &mut usize,
        steps: &mut ChaCha8Rng,
    ) {
        r.step = if steps.gen_bool(0.5) {
            usize::MAX
        } else {
            steps.gen_range(1..2 * CHUNK)
        };
        take_all(r, got, here);
        r.step = usize::MAX;
    }

    /// One thread, the reader reading at random moments and whenever the writer waits for
    /// room, often stopping mid-stream at any byte: every message arrives whole, in order,
    /// with its tag, over many laps; payloads full of values that are exactly what a stamp
    /// would be a lap or two later are never taken for one.
    #[test]
    fn messages_of_every_size_arrive_whole_and_in_order() {
        for seed in 0..6u64 {
            // The largest and the smallest rings.
            let cap = if seed % 2 == 0 {
                MAX_RING_BYTES
            } else {
                MIN_RING_BYTES
            };
            let mut mem = memory(cap);
            let ring = ring(&mut mem, cap);
            let mut w = Writer::new(ring);
            let mut r = Reader::new(1, ring);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut steps = ChaCha8Rng::seed_from_u64(seed + 100);
            let (mut sent, mut got, mut here) = (Vec::new(), Vec::new(), 0usize);
            for i in 0..3000 {
                let len = size(&mut rng, cap);
                let body_at = w.tail + REC as u64;
                let data: Vec<u8> = if i % 2 == 0 {
                    // Fake stamps: the value each 8-byte word's position would have as a stamp
                    // one or two laps on.
                    (0..len.div_ceil(8))
                        .flat_map(|k| {
                            let pos = body_at + 8 * k as u64;
                            let laps = rng.gen_range(1..3u64);
                            (pos + laps * cap as u64 + 1).to_le_bytes()
                        })
                        .take(len)
                        .collect()
                } else {
                    (0..len).map(|_| rng.gen()).collect()
                };
                let cut = rng.gen_range(0..=len);
                let tag = rng.gen::<i32>();
                // A reader that stops making room (a stream it misread) ends the test with a
                // failure rather than a hang.
                let mut idle = 0;
                let wrote = w.write(tag, &[&data[..cut], &data[cut..]], &mut || {
                    let before = r.head;
                    take_some(&mut r, &mut got, &mut here, &mut steps);
                    idle = if r.head == before { idle + 1 } else { 0 };
                    idle < 1000
                });
                assert!(wrote, "seed {seed}: message {i} found the ring stuck");
                sent.push((tag, data));
                if rng.gen_bool(0.3) {
                    take_some(&mut r, &mut got, &mut here, &mut steps);
                }
            }
            take_all(&mut r, &mut got, &mut here);
            assert_eq!(got.len(), sent.len(), "seed {seed}");
            for (i, (a, b)) in got.iter().zip(&sent).enumerate() {
                assert!(
                    a == b,
                    "seed {seed}: message {i} ({} bytes) differs",
                    b.1.len()
                );
            }
            assert!(here > 1000, "small messages are read in place ({here})");
            assert!(w.tail > 4 * cap as u64, "several laps");
        }
    }

    /// A writer that gives up (its `wait` says so) reports it instead of spinning.
    #[test]
    fn a_full_ring_gives_up_when_told() {
        let mut mem = memory(RING_BYTES);
        let ring = ring(&mut mem, RING_BYTES);
        let mut w = Writer::new(ring);
        let big = vec![1u8; RING_BYTES + 1];
        let mut waits = 0;
        assert!(!w.write(7, &[&big], &mut || {
            waits += 1;
            waits < 3
        }));
        assert_eq!(waits, 3);
    }

    #[test]
    fn rings_shrink_with_the_ranks_of_a_machine() {
        assert_eq!(ring_bytes(1), MAX_RING_BYTES);
        assert_eq!(ring_bytes(3), MAX_RING_BYTES);
        assert_eq!(ring_bytes(15), 256 * 1024);
        assert_eq!(ring_bytes(127), 32 * 1024);
        assert_eq!(ring_bytes(10_000), MIN_RING_BYTES);
        for n in 1..300 {
            assert!(ring_bytes(n).is_power_of_two());
        }
    }

    struct Memory(*mut u8);
    // SAFETY: the test's threads use the memory as one writer and one reader of the ring.
    unsafe impl Send for Memory {}

    fn message(i: usize) -> (i32, Vec<u8>) {
        let len = match i % 50 {
            0 => RING_BYTES + i,
            1..=5 => 3000 + i % 7000,
            _ => i % 150,
        };
        (i as i32, (0..len).map(|j| (i * 31 + j) as u8).collect())
    }

    /// A pause at random moments, as preemption would make (a short spin one call in 32, a
    /// sleep of up to 300 µs one in 512): the other end then finds this one stopped anywhere,
    /// e.g. mid-stream at an odd byte, with the ring full or empty.
    fn maybe_pause(rng: &mut ChaCha8Rng) {
        match rng.gen_range(0..512) {
            0 => std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..300))),
            1..=16 => {
                for _ in 0..rng.gen_range(0..4000) {
                    std::hint::spin_loop();
                }
            }
            _ => {}
        }
    }

    /// Writer and reader on two threads (release/acquire across cores), both pausing at random
    /// moments: every message arrives whole and in order.
    #[test]
    fn a_writer_and_a_reader_on_two_threads_agree() {
        const N: usize = 20_000;
        let mut mem = memory(RING_BYTES);
        let base = Memory(mem.as_mut_ptr().cast());
        let reader = std::thread::spawn(move || {
            let base = base;
            // SAFETY: as in `ring`; `mem` outlives this thread (joined below).
            let mut r = Reader::new(0, unsafe { Ring::new(base.0, RING_BYTES) });
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let mut i = 0;
            while i < N {
                maybe_pause(&mut rng);
                let mut ok = true;
                let took = r.next(1024, &mut |tag, m| {
                    let want = message(i);
                    ok = match m {
                        Msg::Here(d) => tag == want.0 && d == &want.1[..],
                        Msg::Owned(v) => tag == want.0 && v == want.1,
                    };
                });
                if took {
                    assert!(ok, "message {i} differs");
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut w = Writer::new(ring(&mut mem, RING_BYTES));
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for i in 0..N {
            maybe_pause(&mut rng);
            let (tag, data) = message(i);
            // A reader that stopped (it found a message wrong) ends the test, not a hang.
            let wrote = w.write(tag, &[&data], &mut || {
                std::thread::yield_now();
                !reader.is_finished()
            });
            if !wrote {
                break;
            }
        }
        reader.join().expect("reader");
    }

    /// Clearing ahead never touches a byte the reader has not read, wherever the reader's
    /// cursor stands (while it reads a streamed record, at any byte): the clearing that
    /// reaches the end of the free room stops at the last whole stamp slot before it.
    #[test]
    fn clearing_ahead_spares_unread_bytes() {
        let cap = MIN_RING_BYTES;
        for head in 0..64u64 {
            for used in [0u64, 1, 7, 8, 9, 15, 16, 17, 100, 500, 1000, 1023] {
                let tail = (head + cap as u64 - used).next_multiple_of(REC as u64);
                if tail > head + cap as u64 {
                    continue;
                }
                let mut mem = memory(cap);
                let ring = ring(&mut mem, cap);
                // SAFETY: the data lie inside `mem` (see `Ring::data`); no reference to them
                // is alive.
                unsafe { std::ptr::write_bytes(ring.data(), 0xAA, cap) };
                let mut w = Writer::new(ring);
                (w.tail, w.head, w.cleared) = (tail, head, tail);
                w.clear_ahead();
                // SAFETY: as above; the writer is done with them.
                let data = unsafe { std::slice::from_raw_parts(ring.data(), cap) };
                for q in head..tail {
                    assert_eq!(
                        data[(q as usize) % cap],
                        0xAA,
                        "head {head} tail {tail}: unread byte {q} cleared"
                    );
                }
                assert!(w.cleared <= head + cap as u64);
            }
        }
    }

    /// A zero-length record that had to be streamed (fewer than two headers of room) is not
    /// taken before the writer has cleared the stamp slot after it: the reader would look at
    /// that slot next, and old bytes there can look like a stamp.
    #[test]
    fn a_streamed_empty_record_waits_for_the_next_slot_to_be_cleared() {
        let cap = MIN_RING_BYTES;
        let mut mem = memory(cap);
        let ring = ring(&mut mem, cap);
        let start = 5 * cap as u64;
        let end = start + REC as u64;
        // Old bytes where the next record's stamp goes: exactly its stamp, and a length.
        ring.stamp(end).store(end + 1, Ordering::Relaxed);
        ring.set_header(end, WHOLE | 8, 9);
        let mut w = Writer::new(ring);
        // 24 bytes free: room for the header, not for the header after it.
        (w.tail, w.head, w.cleared) = (start, start + 24 - cap as u64, start);
        ring.head().store(w.head, Ordering::Relaxed);
        let mut r = Reader::new(0, ring);
        r.head = start;
        let mut got = Vec::new();
        let mut waits = 0;
        assert!(w.write(5, &[], &mut || {
            waits += 1;
            let mut here = 0;
            take_all(&mut r, &mut got, &mut here);
            assert!(got.is_empty(), "taken before the next slot was cleared");
            // The reader frees the room of earlier records.
            ring.head().store(start, Ordering::Relaxed);
            true
        }));
        assert_eq!(waits, 1);
        let mut here = 0;
        take_all(&mut r, &mut got, &mut here);
        assert_eq!(got, vec![(5, Vec::new())]);
    }
}
