//! The node-local lock cache: locks whose token is on this node, idle, that threads of this
//! node take and release with one compare-and-swap each, without the service lock and without
//! the core (a pthreads mutex costs about as much).
//!
//! Owns: the table of cached locks (fixed-size open addressing of cache-line-sized atomic
//! slots keyed by lock id, lock-free for readers) and its state words. Must not touch: the
//! core's lock state (the core decides what is cached, see `lock.rs`), consistency.
//!
//! A slot's state word is one of
//!
//! * `GONE`: not cached (the core has the lock's state; callers take the slow path);
//! * `IDLE`: cached, nobody holds it: [`FastLocks::try_lock`] takes it (`IDLE -> HELD(me)`);
//! * `HELD(owner)`: a thread of this node holds it: [`FastLocks::try_unlock`] by that owner
//!   puts it back (`HELD(me) -> IDLE`);
//! * `HELD(owner) | WANTED`: held, and the core needs it back (another node or a queued thread
//!   of this node waits): the owner's fast unlock fails and its slow unlock hands it to the core.
//!
//! Only the core (under the service lock: one writer) moves a word out of `IDLE` to `GONE`
//! (revocation), sets `WANTED`, caches a lock (`GONE -> IDLE`) or gives a slot to another lock.
//! A slot keeps its key until the core reuses it for another lock; every reuse increments the
//! slot's generation (kept in the word), so a thread that read the old key cannot take the new
//! lock with a stale word: its compare-and-swap expects the old generation.
//!
//! Consistency: a fast unlock stores with `Release`, and every revocation or hand-back reads
//! with `Acquire`, so the writes of every critical section run here happen before the core
//! starts the release that precedes the token's departure.
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots of a node's table (a power of two; 64 bytes each).
pub const DEFAULT_FAST_LOCK_SLOTS: usize = 4096;

/// Slots probed for a lock id from its hash position.
const WINDOW: usize = 16;

const GONE: u64 = 0;
const IDLE: u64 = 1;
const HELD: u64 = 2;
const WANTED: u64 = 1;
const STATE_MASK: u64 = 3;
const OWNER_SHIFT: u32 = 2;
const OWNER_MASK: u64 = 0xffff_ffff;
const GEN_SHIFT: u32 = 34;

/// Key stored for lock `l`: `l ^ KEY_SALT`, so that 0 (an unused slot) names the lock
/// `KEY_SALT`, which is never cached.
const KEY_SALT: u64 = 0x5ac1_1c0d_e5ca_fe01;
const EMPTY: u64 = 0;

#[inline]
fn state(w: u64) -> u64 {
    w & STATE_MASK
}

#[inline]
fn generation(w: u64) -> u64 {
    w >> GEN_SHIFT
}

#[inline]
fn word(gen: u64, owner: u64, st: u64) -> u64 {
    (gen << GEN_SHIFT) | (owner << OWNER_SHIFT) | st
}

#[inline]
fn held_by(w: u64) -> Option<u64> {
    (state(w) & HELD != 0).then_some((w >> OWNER_SHIFT) & OWNER_MASK)
}

/// The owner field for thread `who` (`None`: too large an id, that thread uses the slow path).
#[inline]
fn owner_of(who: u64) -> Option<u64> {
    (who <= OWNER_MASK).then_some(who)
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct Slot {
    key: AtomicU64,
    word: AtomicU64,
    /// Fast acquires of this slot's current lock (written by its holder only).
    fast: AtomicU64,
}

/// What [`FastLocks::revoke`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoke {
    /// The lock is not cached any more: the core has it (idle).
    Gone,
    /// A thread of this node holds it; it is now flagged `WANTED`, so its unlock takes the
    /// slow path and returns the lock to the core.
    Held,
}

/// What [`FastLocks::install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Install {
    /// The lock is cached idle.
    Cached,
    /// The lock is cached idle in the slot of this other lock, which was idle and is not
    /// cached any more.
    Evicted(u64),
    /// No slot near its hash position could be freed: not cached.
    Full,
}

/// The table of one node (see the module doc). Shared between the core (which owns every
/// change of what is cached) and the threads of the node (which take and release cached locks).
#[derive(Debug)]
pub struct FastLocks {
    slots: Box<[Slot]>,
    mask: usize,
    /// Fast acquires counted in slots that were given to other locks since.
    retired: AtomicU64,
    /// Where the next eviction search starts within a window (spreads evictions).
    evict_cursor: AtomicU64,
}

impl Default for FastLocks {
    fn default() -> Self {
        Self::new(DEFAULT_FAST_LOCK_SLOTS)
    }
}

impl FastLocks {
    /// A table of `slots` slots (rounded up to a power of two, at least the probe window).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(WINDOW).next_power_of_two();
        FastLocks {
            slots: (0..n).map(|_| Slot::default()).collect(),
            mask: n - 1,
            retired: AtomicU64::new(0),
            evict_cursor: AtomicU64::new(0),
        }
    }

    #[inline]
    fn home(&self, lock: u64) -> usize {
        // Fibonacci hashing: sequential ids spread, mixed ids stay spread.
        (lock.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    #[inline]
    fn slot(&self, home: usize, i: usize) -> &Slot {
        &self.slots[(home + i) & self.mask]
    }

    /// The slot keyed `lock`, if any.
    #[inline]
    fn find(&self, lock: u64) -> Option<&Slot> {
        let key = lock ^ KEY_SALT;
        if key == EMPTY {
            return None;
        }
        let home = self.home(lock);
        for i in 0..WINDOW {
            let s = self.slot(home, i);
            let k = s.key.load(Ordering::Acquire);
            if k == key {
                return Some(s);
            }
            if k == EMPTY {
                return None;
            }
        }
        None
    }

    /// Take `lock` for thread `who` if it is cached idle here. `false`: use the slow path.
    #[inline]
    pub fn try_lock(&self, lock: u64, who: u64) -> bool {
        let Some(owner) = owner_of(who) else {
            return false;
        };
        let Some(s) = self.find(lock) else {
            return false;
        };
        let w = s.word.load(Ordering::Acquire);
        // Re-read the key after the word: a word of a later owner of the slot (stored after
        // its key) would show that key here.
        if state(w) != IDLE || s.key.load(Ordering::Relaxed) != lock ^ KEY_SALT {
            return false;
        }
        let held = word(generation(w), owner, HELD);
        if s.word
            .compare_exchange(w, held, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Only the holder writes the count.
        s.fast
            .store(s.fast.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        true
    }

    /// Release `lock` held by thread `who` through [`FastLocks::try_lock`], unless the core
    /// wants it back. `false`: use the slow path (also when `who` does not hold it here).
    #[inline]
    pub fn try_unlock(&self, lock: u64, who: u64) -> bool {
        let Some(owner) = owner_of(who) else {
            return false;
        };
        let Some(s) = self.find(lock) else {
            return false;
        };
        let w = s.word.load(Ordering::Relaxed);
        if w != word(generation(w), owner, HELD) || s.key.load(Ordering::Relaxed) != lock ^ KEY_SALT
        {
            return false;
        }
        s.word
            .compare_exchange(
                w,
                word(generation(w), 0, IDLE),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The thread holding cached `lock` through the fast path, if any.
    pub fn holder(&self, lock: u64) -> Option<u64> {
        let s = self.find(lock)?;
        held_by(s.word.load(Ordering::Acquire))
    }

    /// Whether `lock` is cached idle (for tests and assertions).
    pub fn is_idle(&self, lock: u64) -> bool {
        self.find(lock)
            .is_some_and(|s| state(s.word.load(Ordering::Acquire)) == IDLE)
    }

    /// Acquires that took the fast path so far (exact when no thread is inside one).
    pub fn fast_acquires(&self) -> u64 {
        let live: u64 = self
            .slots
            .iter()
            .map(|s| s.fast.load(Ordering::Relaxed))
            .sum();
        self.retired.load(Ordering::Relaxed) + live
    }

    /// Core: cache `lock` idle (the core has its token and nobody holds or wants it).
    pub(crate) fn install(&self, lock: u64) -> Install {
        let key = lock ^ KEY_SALT;
        if key == EMPTY {
            return Install::Full;
        }
        let home = self.home(lock);
        let mut free = None;
        for i in 0..WINDOW {
            let s = self.slot(home, i);
            let k = s.key.load(Ordering::Relaxed);
            if k == key {
                let w = s.word.load(Ordering::Relaxed);
                debug_assert_eq!(state(w), GONE, "lock {lock:#x} is cached twice");
                s.word
                    .store(word(generation(w), 0, IDLE), Ordering::Release);
                return Install::Cached;
            }
            if free.is_none() && (k == EMPTY || state(s.word.load(Ordering::Relaxed)) == GONE) {
                free = Some(s);
            }
            if k == EMPTY {
                break;
            }
        }
        if let Some(s) = free {
            self.reassign(s, key);
            return Install::Cached;
        }
        // Evict an idle lock of the window (the core uncaches it).
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed) as usize;
        for i in 0..WINDOW {
            let s = self.slot(home, (start + i) % WINDOW);
            let w = s.word.load(Ordering::Relaxed);
            if state(w) == IDLE
                && s.word
                    .compare_exchange(
                        w,
                        word(generation(w), 0, GONE),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                let old = s.key.load(Ordering::Relaxed) ^ KEY_SALT;
                self.reassign(s, key);
                return Install::Evicted(old);
            }
        }
        Install::Full
    }

    /// Give slot `s` (unused, or `GONE`) to the lock keyed `key`, cached idle.
    fn reassign(&self, s: &Slot, key: u64) {
        let w = s.word.load(Ordering::Relaxed);
        let gen = generation(w).wrapping_add(1) & (u64::MAX >> GEN_SHIFT);
        self.retired
            .fetch_add(s.fast.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        s.word.store(word(gen, 0, GONE), Ordering::Relaxed);
        s.key.store(key, Ordering::Release);
        s.word.store(word(gen, 0, IDLE), Ordering::Release);
    }

    /// Core: take cached `lock` back. An idle lock is uncached at once; a held one is flagged
    /// `WANTED` (its holder's unlock then takes the slow path).
    pub(crate) fn revoke(&self, lock: u64) -> Revoke {
        let Some(s) = self.find(lock) else {
            return Revoke::Gone;
        };
        let mut w = s.word.load(Ordering::Acquire);
        loop {
            let next = match state(w) {
                GONE => return Revoke::Gone,
                IDLE => word(generation(w), 0, GONE),
                st if st & WANTED != 0 => return Revoke::Held,
                _ => w | WANTED,
            };
            match s
                .word
                .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if state(w) == IDLE => return Revoke::Gone,
                Ok(_) => return Revoke::Held,
                Err(now) => w = now,
            }
        }
    }

    /// Core: uncache `lock` if it is idle; `false` if a thread holds it (nothing flagged).
    pub(crate) fn try_revoke(&self, lock: u64) -> bool {
        let Some(s) = self.find(lock) else {
            return true;
        };
        let w = s.word.load(Ordering::Acquire);
        match state(w) {
            GONE => true,
            IDLE => s
                .word
                .compare_exchange(
                    w,
                    word(generation(w), 0, GONE),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok(),
            _ => false,
        }
    }

    /// Core: thread `who` holds cached `lock` through the fast path and calls the core about
    /// it (a slow unlock, a condition wait): uncache it; the core records `who` as the holder.
    /// `false` if `who` does not hold it here.
    pub(crate) fn take_held(&self, lock: u64, who: u64) -> bool {
        let Some(s) = self.find(lock) else {
            return false;
        };
        let mut w = s.word.load(Ordering::Acquire);
        loop {
            if held_by(w) != Some(who) || owner_of(who).is_none() {
                return false;
            }
            match s.word.compare_exchange(
                w,
                word(generation(w), 0, GONE),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_unlock_and_revocation() {
        let t = FastLocks::new(64);
        assert!(!t.try_lock(7, 1), "not cached");
        assert_eq!(t.install(7), Install::Cached);
        assert!(t.try_lock(7, 1));
        assert_eq!(t.holder(7), Some(1));
        assert!(!t.try_lock(7, 2), "held");
        assert!(!t.try_unlock(7, 2), "not the holder");
        assert!(t.try_unlock(7, 1));
        assert!(t.is_idle(7));
        assert_eq!(t.fast_acquires(), 1);
        // Held: revocation flags it and the holder's unlock fails.
        assert!(t.try_lock(7, 3));
        assert_eq!(t.revoke(7), Revoke::Held);
        assert!(!t.try_unlock(7, 3));
        assert_eq!(t.holder(7), Some(3));
        assert!(!t.take_held(7, 4));
        assert!(t.take_held(7, 3));
        assert!(!t.try_lock(7, 3), "gone");
        assert_eq!(t.holder(7), None);
        // Cached again in the same slot; idle revocation is immediate.
        assert_eq!(t.install(7), Install::Cached);
        assert_eq!(t.revoke(7), Revoke::Gone);
        assert!(!t.try_lock(7, 1));
        assert_eq!(t.fast_acquires(), 2);
    }

    #[test]
    fn a_full_window_evicts_an_idle_lock_and_keeps_the_counts() {
        let t = FastLocks::new(16);
        for l in 0..16u64 {
            assert_eq!(t.install(l), Install::Cached, "lock {l}");
            assert!(t.try_lock(l, 9));
            assert!(t.try_unlock(l, 9));
        }
        // Every slot is taken; hold all but lock 5.
        for l in (0..16u64).filter(|&l| l != 5) {
            assert!(t.try_lock(l, 9));
        }
        assert_eq!(t.install(100), Install::Evicted(5));
        assert!(!t.try_lock(5, 9), "evicted");
        assert!(t.try_lock(100, 9));
        assert_eq!(t.install(101), Install::Full);
        assert_eq!(t.fast_acquires(), 16 + 15 + 1);
    }

    #[test]
    fn a_stale_key_cannot_take_the_slots_next_lock() {
        let t = FastLocks::new(16);
        assert_eq!(t.install(1), Install::Cached);
        let s = t.find(1).expect("lock 1 is cached");
        let stale = s.word.load(Ordering::Relaxed);
        assert_eq!(t.revoke(1), Revoke::Gone);
        t.reassign(s, 2 ^ KEY_SALT);
        // A thread that read lock 1's word before the reuse fails its exchange.
        assert!(s
            .word
            .compare_exchange(
                stale,
                word(generation(stale), 1, HELD),
                Ordering::Acquire,
                Ordering::Relaxed
            )
            .is_err());
        assert!(!t.try_lock(1, 1));
    }

    #[test]
    fn threads_count_exactly() {
        let t = std::sync::Arc::new(FastLocks::new(64));
        assert_eq!(t.install(3), Install::Cached);
        let counter = std::sync::Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (1..=4u64)
            .map(|who| {
                let (t, c) = (t.clone(), counter.clone());
                std::thread::spawn(move || {
                    let mut done = 0;
                    while done < 10_000 {
                        if t.try_lock(3, who) {
                            // A non-atomic read-modify-write under the lock.
                            let v = c.load(Ordering::Relaxed);
                            c.store(v + 1, Ordering::Relaxed);
                            assert!(t.try_unlock(3, who));
                            done += 1;
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().expect("a thread panicked");
        }
        assert_eq!(counter.load(Ordering::Relaxed), 40_000);
        assert_eq!(t.fast_acquires(), 40_000);
    }
}
