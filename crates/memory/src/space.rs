//! The global address space of one node: a memfd mapped twice, once at the fixed global base
//! (the **application view**, registered with userfaultfd) and once anywhere (the **backdoor
//! view**, which never faults and which the service thread uses to read and install page
//! contents); page access control on the application view; the fault thread.
//!
//! Access states of a page in the application view:
//! * `None`: no page-table entry (`MADV_DONTNEED`; the data stays in the memfd). The next access
//!   raises a MINOR fault (MISSING if the page was never populated).
//! * `Read`: mapped and userfaultfd-write-protected: writes raise a WP fault.
//! * `ReadWrite`: mapped without write protection.
//!
//! By default no signal handler is involved: the kernel blocks a faulting thread until
//! `set_access` grants what it needs (or `wake` tells it to retry); kernel accesses (e.g.
//! `read(2)` into shared memory) wait the same way. With `SpaceConfig::signal_faults`
//! (`SQUALL_FAULTS=signal`) the kernel raises SIGBUS in the faulting thread instead
//! ([`crate::signal`]); where the default mode would wake blocked threads, a counter such a
//! thread sleeps on is bumped instead ([`AddressSpace::wait_for_wake`]). Fault messages are read either by a fault thread of this crate
//! (`start_fault_thread`) or by the caller's own event loop (`fault_source`: the runtime's
//! service thread polls the userfaultfd beside its sockets); both only read the messages and
//! hand them to the caller's callback, which runs no code of this crate.
//!
//! An **adopted region** (`adopt_region`) is a page-aligned range of the program itself (its
//! `SQUALL_GLOBAL` section) taken over by the same machinery: its current bytes are copied into
//! the memfd at the offset of `pages` reserved page numbers (the top of node 0's arena, see
//! `HeapLayout::adopted_first`), the memfd is mapped over the range at that offset
//! (`MAP_FIXED | MAP_SHARED`) and the range is registered with the same userfaultfd. Its pages
//! are then ordinary global pages to everyone else: the backdoor and the access table serve
//! them at their page numbers; only `page_of`/`addr_of` know that their application-view
//! address is the program's.
//!
//! Owns: the mappings, the page access-state table, fault capture (the fault thread or the
//! fault source). Must not touch: the network or protocol decisions (which pages to grant is
//! the caller's business).

use crate::error::MemoryError;
use crate::signal_sys::{futex_wait, futex_wake_all, UFFD_FEATURE_SIGBUS};
use crate::sys;
use crate::table::AccessTable;
use squall_core::{env, Access, HeapLayout, PageId, PageMemory, PAGE_SIZE};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// Default base of the global range (`SQUALL_HEAP_BASE`).
pub const DEFAULT_BASE: usize = 0x5000_0000_0000;
/// Default size of the global range (`SQUALL_HEAP_SIZE`): 64 GiB.
pub const DEFAULT_SIZE: usize = 64 << 30;

/// The largest global range at `base`: up to the symmetric arena
/// ([`crate::SYMMETRIC_BASE`]) when it starts below it, else up to the top of a 47-bit user
/// address space.
pub fn max_range(base: usize) -> usize {
    let top = if base < crate::SYMMETRIC_BASE {
        crate::SYMMETRIC_BASE
    } else {
        1 << 47
    };
    top.saturating_sub(base)
}

/// Where and how big the global range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceConfig {
    /// Virtual address of the range, identical on every node; page aligned.
    pub base: usize,
    /// Bytes in the range; a multiple of the page size.
    pub size: usize,
    /// Open userfaultfd with `UFFD_USER_MODE_ONLY` (works without privileges on kernels that
    /// allow it; system calls touching a non-resident shared page then fail with EFAULT).
    pub user_mode_only: bool,
    /// Faults raise SIGBUS in the faulting thread, which serves them itself
    /// (`SQUALL_FAULTS=signal`, see [`crate::signal`]); system calls touching a page this
    /// node cannot access then fail with EFAULT.
    pub signal_faults: bool,
}

impl Default for SpaceConfig {
    fn default() -> Self {
        SpaceConfig {
            base: DEFAULT_BASE,
            size: DEFAULT_SIZE,
            user_mode_only: false,
            signal_faults: false,
        }
    }
}

impl SpaceConfig {
    /// Read `SQUALL_HEAP_BASE` and `SQUALL_HEAP_SIZE` (defaults when unset).
    pub fn from_env() -> Result<Self, MemoryError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env) with an explicit variable look-up (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, MemoryError> {
        let mut cfg = SpaceConfig::default();
        if let Some(v) = get(env::HEAP_BASE) {
            cfg.base = parse_addr(&v).ok_or_else(|| MemoryError::Config {
                var: env::HEAP_BASE,
                value: v.clone(),
                why: "expected a hexadecimal (0x...) or decimal address".into(),
            })?;
        }
        if let Some(v) = get(env::HEAP_SIZE) {
            cfg.size = parse_size(&v).ok_or_else(|| MemoryError::Config {
                var: env::HEAP_SIZE,
                value: v.clone(),
                why: "expected a byte count with optional K, M, G or T suffix, e.g. 64G".into(),
            })?;
        }
        cfg.signal_faults = match get(env::FAULTS).as_deref().map(str::trim) {
            None | Some("" | "thread") => false,
            Some("signal") => true,
            Some(v) => {
                return Err(MemoryError::Config {
                    var: env::FAULTS,
                    value: v.into(),
                    why: "expected `thread` (the default) or `signal`".into(),
                })
            }
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), MemoryError> {
        if !self.base.is_multiple_of(PAGE_SIZE) || self.base == 0 {
            return Err(MemoryError::Config {
                var: env::HEAP_BASE,
                value: format!("{:#x}", self.base),
                why: format!("must be a non-zero multiple of the page size {PAGE_SIZE}"),
            });
        }
        if !self.size.is_multiple_of(PAGE_SIZE) || self.size == 0 {
            return Err(MemoryError::Config {
                var: env::HEAP_SIZE,
                value: self.size.to_string(),
                why: format!("must be a non-zero multiple of the page size {PAGE_SIZE}"),
            });
        }
        if self.base.checked_add(self.size).is_none() {
            return Err(MemoryError::Config {
                var: env::HEAP_SIZE,
                value: self.size.to_string(),
                why: format!(
                    "base {:#x} plus size overflows the address space",
                    self.base
                ),
            });
        }
        Ok(())
    }
}

/// Parse `0x5000_0000_0000` or a decimal address.
pub fn parse_addr(s: &str) -> Option<usize> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        usize::from_str_radix(h, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// Parse `64G`, `512M`, `1T`, `4096`, `16KiB`, ... (binary units).
pub fn parse_size(s: &str) -> Option<usize> {
    let t: String = s.trim().chars().filter(|&c| c != '_').collect();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, shift) = match body.chars().last()? {
        'k' => (&body[..body.len() - 1], 10),
        'm' => (&body[..body.len() - 1], 20),
        'g' => (&body[..body.len() - 1], 30),
        't' => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let n: usize = num.trim().parse().ok()?;
    n.checked_mul(1usize << shift)
}

/// One fault of an application thread on the global range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The page faulted on.
    pub page: PageId,
    /// The faulting address (exact if the kernel supports it, else page aligned).
    pub addr: usize,
    /// The access was a write.
    pub write: bool,
    /// Kernel thread id of the faulting thread (0 if the kernel does not report it).
    pub tid: u32,
}

/// Counters kept by the address space.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpaceStats {
    /// Fault messages delivered to the callback.
    pub faults: u64,
    /// Of which write faults.
    pub write_faults: u64,
    /// `set_access` calls that changed a page's state.
    pub transitions: u64,
}

/// What the bytes of a region to adopt are (see [`AddressSpace::adopt_regions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contents {
    /// Initialised data (a PROGBITS section): its non-zero pages are copied into the backing
    /// memfd (all-zero pages are left as holes, which read as zeros).
    Data,
    /// Zero-initialised data (a NOBITS section, anonymous memory): only pages already resident
    /// (written before the adoption, e.g. by a constructor) are inspected and copied if not
    /// all zero; the rest costs no memory until touched.
    Zeroed,
}

/// A page-aligned range of this process to adopt (see [`AddressSpace::adopt_regions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Application-view address (the program's own address), page aligned.
    pub start: usize,
    /// Bytes, a non-zero multiple of the page size.
    pub len: usize,
    /// How its current bytes are carried over.
    pub contents: Contents,
}

/// A range of the program adopted into the global range (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Adopted {
    /// Application-view address of the region (the program's own address).
    start: usize,
    /// Page number of its first page.
    first: u64,
    /// Pages in the region.
    pages: u64,
}

/// The reserved global range of one node. `Send + Sync`; share it as `Arc<AddressSpace>`.
pub struct AddressSpace {
    cfg: SpaceConfig,
    /// The adopted regions, sorted by page number (a few: the program's data and bss).
    adopted: OnceLock<Vec<Adopted>>,
    memfd: OwnedFd,
    uffd: OwnedFd,
    backdoor: usize,
    table: AccessTable,
    fault_thread_running: AtomicBool,
    /// `MADV_POPULATE_WRITE` works here (cleared the first time the kernel refuses it).
    populate_ok: AtomicBool,
    faults: AtomicU64,
    write_faults: AtomicU64,
    transitions: AtomicU64,
    /// Signal mode: bumped wherever the default mode wakes threads blocked on a fault (a
    /// resumed fault, an access set to what it already was); what a thread waiting for its
    /// page sleeps on ([`AddressSpace::wait_for_wake`]).
    wakes: AtomicU32,
    /// Threads sleeping in [`AddressSpace::wait_for_wake`].
    sleepers: AtomicU32,
    /// Set by [`AddressSpace::detach`]: the views are plain memory from then on.
    detached: AtomicBool,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("base", &format_args!("{:#x}", self.cfg.base))
            .field("size", &self.cfg.size)
            .finish_non_exhaustive()
    }
}

const REQUIRED_FEATURES: &[(u64, &str)] = &[
    (
        sys::UFFD_FEATURE_MISSING_SHMEM,
        "UFFD_FEATURE_MISSING_SHMEM",
    ),
    (sys::UFFD_FEATURE_MINOR_SHMEM, "UFFD_FEATURE_MINOR_SHMEM"),
    (
        sys::UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
        "UFFD_FEATURE_WP_HUGETLBFS_SHMEM",
    ),
];
const OPTIONAL_FEATURES: u64 = sys::UFFD_FEATURE_THREAD_ID | sys::UFFD_FEATURE_EXACT_ADDRESS;

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

impl AddressSpace {
    /// Reserve the global range at `cfg.base` (never anywhere else), back it with a sparse
    /// memfd, map the backdoor view and register the application view with userfaultfd. All
    /// pages start with `Access::None`.
    pub fn reserve(cfg: &SpaceConfig) -> Result<Arc<Self>, MemoryError> {
        cfg.validate()?;
        if sys::host_page_size() != PAGE_SIZE {
            return Err(MemoryError::Config {
                var: env::HEAP_BASE,
                value: format!("{:#x}", cfg.base),
                why: format!(
                    "host page size {} differs from squall's page size {PAGE_SIZE}",
                    sys::host_page_size()
                ),
            });
        }
        let supported = sys::uffd_probe_features(cfg.user_mode_only)
            .map_err(|w| MemoryError::Userfaultfd { why: w.join("; ") })?;
        let missing: Vec<&str> = REQUIRED_FEATURES
            .iter()
            .filter(|(f, _)| supported & f == 0)
            .map(|(_, n)| *n)
            .collect();
        if !missing.is_empty() {
            return Err(MemoryError::MissingFeatures {
                missing: missing.join(", "),
            });
        }
        let mut want =
            REQUIRED_FEATURES.iter().fold(0, |a, (f, _)| a | f) | (OPTIONAL_FEATURES & supported);
        if cfg.signal_faults {
            if supported & UFFD_FEATURE_SIGBUS == 0 || !cfg!(target_arch = "x86_64") {
                return Err(MemoryError::Signal {
                    why: "this kernel's userfaultfd lacks UFFD_FEATURE_SIGBUS, or the machine \
                          is not x86-64"
                        .into(),
                });
            }
            want |= UFFD_FEATURE_SIGBUS;
        }
        let uffd = sys::userfaultfd_open(cfg.user_mode_only)
            .map_err(|w| MemoryError::Userfaultfd { why: w.join("; ") })?;
        sys::uffd_api(uffd.as_raw_fd(), want).map_err(|e| MemoryError::Userfaultfd {
            why: format!("UFFDIO_API: {e}"),
        })?;

        let memfd = sys::memfd_create(c"squall-global", cfg.size).map_err(|source| {
            MemoryError::Backing {
                size: cfg.size,
                source,
            }
        })?;
        let reserve_err = |source| MemoryError::Reserve {
            base: cfg.base,
            size: cfg.size,
            source,
        };
        let app =
            sys::map_shared(memfd.as_raw_fd(), Some(cfg.base), cfg.size).map_err(reserve_err)?;
        let backdoor = match sys::map_shared(memfd.as_raw_fd(), None, cfg.size) {
            Ok(b) => b,
            Err(source) => {
                sys::unmap(app, cfg.size);
                return Err(MemoryError::Backing {
                    size: cfg.size,
                    source,
                });
            }
        };
        let mode = sys::UFFDIO_REGISTER_MODE_MISSING
            | sys::UFFDIO_REGISTER_MODE_MINOR
            | sys::UFFDIO_REGISTER_MODE_WP;
        if let Err(e) = sys::uffd_register(uffd.as_raw_fd(), app, cfg.size, mode) {
            sys::unmap(app, cfg.size);
            sys::unmap(backdoor, cfg.size);
            return Err(MemoryError::Userfaultfd {
                why: format!("UFFDIO_REGISTER of {:#x}+{:#x}: {e}", cfg.base, cfg.size),
            });
        }
        Ok(Arc::new(AddressSpace {
            cfg: *cfg,
            adopted: OnceLock::new(),
            memfd,
            uffd,
            backdoor,
            table: AccessTable::new((cfg.size / PAGE_SIZE) as u64),
            fault_thread_running: AtomicBool::new(false),
            populate_ok: AtomicBool::new(true),
            faults: AtomicU64::new(0),
            write_faults: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
            wakes: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            detached: AtomicBool::new(false),
        }))
    }

    /// First address of the range (the same on every node).
    #[inline]
    pub fn base(&self) -> usize {
        self.cfg.base
    }
    /// Bytes in the range.
    #[inline]
    pub fn size(&self) -> usize {
        self.cfg.size
    }
    /// Pages in the range.
    pub fn total_pages(&self) -> u64 {
        self.table.len()
    }
    /// Whether `addr` lies in the range or in the adopted region.
    pub fn contains(&self, addr: usize) -> bool {
        (addr >= self.cfg.base && addr - self.cfg.base < self.cfg.size)
            || self.adopted_page(addr).is_some()
    }
    /// The page holding `addr`, if it is in the range or in the adopted region.
    pub fn page_of(&self, addr: usize) -> Option<PageId> {
        if addr >= self.cfg.base && addr - self.cfg.base < self.cfg.size {
            return Some(PageId(((addr - self.cfg.base) / PAGE_SIZE) as u64));
        }
        self.adopted_page(addr)
    }
    fn adopted_page(&self, addr: usize) -> Option<PageId> {
        self.adopted.get()?.iter().find_map(|a| {
            let off = addr.wrapping_sub(a.start);
            (off < a.pages as usize * PAGE_SIZE).then(|| PageId(a.first + (off / PAGE_SIZE) as u64))
        })
    }
    /// Application-view address of the first byte of `page` (may lie past the range end for an
    /// out-of-range page; check with `contains`). Pages of the adopted region are at the
    /// program's own address.
    pub fn addr_of(&self, page: PageId) -> usize {
        for a in self.adopted.get().map_or(&[][..], Vec::as_slice) {
            let i = page.0.wrapping_sub(a.first);
            if i < a.pages {
                return a.start + i as usize * PAGE_SIZE;
            }
        }
        self.cfg.base + page.0 as usize * PAGE_SIZE
    }
    /// Every adopted region as `(start address, first page, pages)`, by page number.
    pub fn adopted_regions(&self) -> Vec<(usize, PageId, u64)> {
        self.adopted
            .get()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|a| (a.start, PageId(a.first), a.pages))
            .collect()
    }

    /// Take over `start..start+len` of this process (page aligned; the program's
    /// `SQUALL_GLOBAL` section) as global pages numbered from `first`: [`Self::adopt_regions`]
    /// with one [`Contents::Data`] region.
    pub fn adopt_region(
        &self,
        start: usize,
        len: usize,
        first: PageId,
    ) -> Result<(PageId, u64), MemoryError> {
        self.adopt_regions(
            &[Region {
                start,
                len,
                contents: Contents::Data,
            }],
            first,
        )
    }

    /// Take over `regions` of this process (page aligned, disjoint; the program's data and
    /// bss) as global pages numbered consecutively from `first`, in the order given (`first`
    /// must be pages of the range no allocator hands out: `HeapLayout::adopted_first`, reserved
    /// from node 0's heap with `Heap::reserve_top`). For each region, its current non-zero
    /// pages are copied into the backing memfd at its pages (see [`Contents`]: zero pages stay
    /// holes and cost no memory), the memfd is mapped over the region (`MAP_FIXED |
    /// MAP_SHARED`) and the region is registered with this space's userfaultfd. Every page
    /// starts with `Access::None`; the backdoor holds the bytes the regions had. Call it once,
    /// before any other thread uses the regions. Returns `(first, pages)` (all regions).
    pub fn adopt_regions(
        &self,
        regions: &[Region],
        first: PageId,
    ) -> Result<(PageId, u64), MemoryError> {
        let (s0, l0) = regions.first().map_or((0, 0), |r| (r.start, r.len));
        let err0 = |why: String| MemoryError::Adopt {
            start: s0,
            len: l0,
            why,
        };
        if regions.is_empty() {
            return Err(err0("no region to adopt".into()));
        }
        let mut total = 0u64;
        for (i, r) in regions.iter().enumerate() {
            let err = |why: String| MemoryError::Adopt {
                start: r.start,
                len: r.len,
                why,
            };
            if r.start == 0
                || !r.start.is_multiple_of(PAGE_SIZE)
                || !r.len.is_multiple_of(PAGE_SIZE)
            {
                return Err(err(format!(
                    "start and length must be non-zero multiples of the page size {PAGE_SIZE} \
                     (link with the flags of `pkg-config --libs squall-pthread`, which \
                     page-align the shared sections)"
                )));
            }
            if r.len == 0 {
                return Err(err("the region is empty".into()));
            }
            let end = r
                .start
                .checked_add(r.len)
                .ok_or_else(|| err("the region wraps around the address space".into()))?;
            if r.start < self.cfg.base + self.cfg.size && self.cfg.base < end {
                return Err(err(format!(
                    "the region overlaps the global range {:#x}+{:#x}",
                    self.cfg.base, self.cfg.size
                )));
            }
            if regions[..i]
                .iter()
                .any(|o| r.start < o.start + o.len && o.start < end)
            {
                return Err(err("the region overlaps another region".into()));
            }
            total += (r.len / PAGE_SIZE) as u64;
        }
        self.check(first, total)?;
        if self.adopted.get().is_some() {
            return Err(err0("this node already adopted its regions".into()));
        }
        for p in first.0..first.0 + total {
            if self.table.get(p) != Access::None {
                return Err(err0(format!("{} is already in use by the heap", PageId(p))));
            }
        }
        let mut list = Vec::with_capacity(regions.len());
        let mut next = first.0;
        for r in regions {
            let err = |why: String| MemoryError::Adopt {
                start: r.start,
                len: r.len,
                why,
            };
            let pages = (r.len / PAGE_SIZE) as u64;
            // Copy first (the program's non-zero pages into the memfd pages), then map those
            // pages over the program's range: the same bytes at the same addresses.
            let offset = next as usize * PAGE_SIZE;
            let resident = match r.contents {
                Contents::Data => None,
                Contents::Zeroed => Some(
                    sys::resident_pages(r.start, r.len)
                        .map_err(|e| err(format!("mincore: {e}")))?,
                ),
            };
            for i in 0..pages as usize {
                if resident.as_ref().is_some_and(|res| !res[i]) {
                    continue; // never touched: zeros, and the memfd hole reads as zeros
                }
                let at = r.start + i * PAGE_SIZE;
                if !sys::mapping_is_zero(at, PAGE_SIZE) {
                    sys::copy_within_process(at, self.backdoor + offset + i * PAGE_SIZE, PAGE_SIZE);
                }
            }
            sys::map_shared_over(self.memfd.as_raw_fd(), r.start, r.len, offset)
                .map_err(|e| err(format!("mmap over the region: {e}")))?;
            let mode = sys::UFFDIO_REGISTER_MODE_MISSING
                | sys::UFFDIO_REGISTER_MODE_MINOR
                | sys::UFFDIO_REGISTER_MODE_WP;
            sys::uffd_register(self.uffd.as_raw_fd(), r.start, r.len, mode)
                .map_err(|e| err(format!("UFFDIO_REGISTER: {e}")))?;
            // Nothing may stay mapped behind the table's back (`None`: no page-table entry).
            sys::zap(r.start, r.len).map_err(|e| err(format!("madvise: {e}")))?;
            list.push(Adopted {
                start: r.start,
                first: next,
                pages,
            });
            next += pages;
        }
        self.adopted
            .set(list)
            .map_err(|_| err0("this node already adopted its regions".into()))?;
        Ok((first, total))
    }

    /// At the end of the job (after the last barrier, when no fault will be served any more):
    /// the application view of the range and the adopted regions become plain mappings of
    /// this node's memfd, so code that still runs in the process (exit handlers, destructors
    /// of the program, on a thread's shared stack or touching globals) reads and writes them
    /// without waiting for a fault server that is gone (a thread already waiting is woken).
    /// On node 0, the home of every adopted page, the regions hold the final values; other
    /// pages hold whatever copy this node had (the data is no longer coherent).
    pub fn detach(&self) -> Result<(), MemoryError> {
        let adopted = self.adopted.get().map_or(&[][..], Vec::as_slice);
        let ranges = adopted
            .iter()
            .map(|a| (a.start, a.pages as usize * PAGE_SIZE))
            .chain(std::iter::once((self.cfg.base, self.cfg.size)));
        for (start, len) in ranges {
            sys::uffd_unregister(self.uffd.as_raw_fd(), start, len).map_err(|e| {
                MemoryError::Adopt {
                    start,
                    len,
                    why: format!("UFFDIO_UNREGISTER: {e}"),
                }
            })?;
        }
        self.detached.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`detach`](Self::detach) made the views plain memory (no fault comes any more).
    pub fn detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    /// One past the last page of the run of pages from `p` (below `end`) whose application
    /// view is contiguous (runs do not cross the adopted region's edges).
    fn run_limit(&self, p: u64, end: u64) -> u64 {
        let mut limit = end;
        for a in self.adopted.get().map_or(&[][..], Vec::as_slice) {
            if p < a.first {
                limit = limit.min(a.first);
            } else if p < a.first + a.pages {
                limit = limit.min(a.first + a.pages);
            }
        }
        limit
    }
    /// The static layout of this range split among `nodes` arenas (for [`crate::Heap::new`]
    /// and the protocol's manager look-ups).
    pub fn layout(&self, nodes: u16) -> HeapLayout {
        HeapLayout {
            nodes,
            total_pages: self.total_pages(),
        }
    }
    /// Counters so far.
    pub fn stats(&self) -> SpaceStats {
        SpaceStats {
            faults: self.faults.load(Ordering::Relaxed),
            write_faults: self.write_faults.load(Ordering::Relaxed),
            transitions: self.transitions.load(Ordering::Relaxed),
        }
    }

    fn check(&self, first: PageId, count: u64) -> Result<(), MemoryError> {
        let total = self.total_pages();
        if first.0 >= total || count > total - first.0 {
            return Err(MemoryError::OutOfRange {
                page: first,
                count,
                total,
            });
        }
        Ok(())
    }

    fn backdoor_addr(&self, page: PageId, offset: usize, len: usize) -> usize {
        assert!(
            page.0 < self.total_pages() && offset + len <= PAGE_SIZE,
            "{page} offset {offset} length {len} outside the global range of {} pages",
            self.total_pages()
        );
        self.backdoor + page.0 as usize * PAGE_SIZE + offset
    }

    /// Set the application's access to `count` pages from `first`, one kernel call per run of
    /// pages sharing a previous state. Granting wakes threads blocked on those pages.
    pub fn set_access_range(
        &self,
        first: PageId,
        count: u64,
        access: Access,
    ) -> Result<(), MemoryError> {
        self.check(first, count)?;
        let mut p = first.0;
        let end = first.0 + count;
        while p < end {
            let prev = self.table.get(p);
            let limit = self.run_limit(p, end);
            let mut q = p + 1;
            while q < limit && self.table.get(q) == prev {
                q += 1;
            }
            self.transition(PageId(p), q - p, prev, access)?;
            p = q;
        }
        Ok(())
    }

    /// Apply `prev -> next` to a run of pages all in state `prev`.
    fn transition(
        &self,
        first: PageId,
        count: u64,
        prev: Access,
        next: Access,
    ) -> Result<(), MemoryError> {
        let fd = self.uffd.as_raw_fd();
        let start = self.addr_of(first);
        let len = count as usize * PAGE_SIZE;
        let kerr = |op, source| MemoryError::Kernel {
            op,
            page: first,
            count,
            source,
        };
        // Whether the kernel call below wakes the threads blocked on these pages: their `woken`
        // bits are set before it (a fault read after the bit is set clears it again, so a
        // thread that blocks after the call is never taken for woken), cleared if it fails.
        let wakes = !matches!(
            (prev, next),
            (_, Access::None) | (Access::ReadWrite, Access::Read)
        );
        if wakes {
            for p in first.0..first.0 + count {
                self.table.set_woken(p, true);
            }
        }
        let unwoken = || {
            if wakes {
                for p in first.0..first.0 + count {
                    self.table.set_woken(p, false);
                }
            }
        };
        if prev == next {
            // A thread may have faulted on a page it can already access (e.g. a duplicate
            // report); let it retry.
            if next != Access::None && self.cfg.signal_faults {
                self.wake_waiters();
            } else if next != Access::None {
                retry(|| sys::uffd_wake(fd, start, len)).map_err(|e| {
                    unwoken();
                    kerr("wake", e)
                })?;
            }
            return Ok(());
        }
        // The table changes first, so a thread woken by the kernel call below already sees
        // its new access; it is restored if the kernel refuses.
        for p in first.0..first.0 + count {
            self.table.set(p, next);
        }
        let done = match (prev, next) {
            (_, Access::None) => sys::zap(start, len).map_err(|e| kerr("madvise", e)),
            (Access::None, grant) => self.map_run(first, count, grant == Access::Read),
            (Access::Read, _) => retry(|| sys::uffd_writeprotect(fd, start, len, false))
                .map_err(|e| kerr("writeprotect", e)),
            (Access::ReadWrite, _) => retry(|| sys::uffd_writeprotect(fd, start, len, true))
                .map_err(|e| kerr("writeprotect", e)),
        };
        if let Err(e) = done {
            for p in first.0..first.0 + count {
                self.table.set(p, prev);
            }
            unwoken();
            return Err(e);
        }
        self.transitions.fetch_add(count, Ordering::Relaxed);
        Ok(())
    }

    /// Signal mode: wake the threads waiting for their fault to be served, to retry their
    /// access. Called only where the default mode wakes blocked threads once the protocol is
    /// done with a fault (`resume`, after every access change it needed: a miss that writes
    /// is granted read, then twinned, then resumed), not at each grant. SeqCst here and in
    /// [`wait_for_wake`](Self::wait_for_wake): either the sleeper sees the new count or this
    /// sees the sleeper.
    fn wake_waiters(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex_wake_all(&self.wakes);
        }
    }

    /// Signal mode: how many times this node woke waiting threads; a thread reads it before it
    /// hands its fault to the protocol and waits for it to change.
    pub fn wake_epoch(&self) -> u32 {
        self.wakes.load(Ordering::SeqCst)
    }

    /// Whether faults are served by the faulting threads (`SQUALL_FAULTS=signal`).
    pub fn signal_faults(&self) -> bool {
        self.cfg.signal_faults
    }

    /// Count a fault (the statistics' faults): one read from the userfaultfd, or in signal
    /// mode one a faulting thread serves itself.
    pub fn count_fault(&self, write: bool) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        if write {
            self.write_faults.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Signal mode: sleep until this node wakes waiting threads after `since`
    /// ([`wake_epoch`](Self::wake_epoch)), or `timeout` (a backstop) passes. The caller then
    /// retries its access, which faults again if it still lacks it, as a thread the kernel
    /// wakes does.
    pub fn wait_for_wake(&self, since: u32, timeout: std::time::Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if self.wakes.load(Ordering::SeqCst) == since {
            futex_wait(&self.wakes, since, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Install page-table entries for unmapped pages (UFFDIO_CONTINUE), populating memfd pages
    /// that were never touched; wakes waiters.
    fn map_run(&self, first: PageId, count: u64, wp: bool) -> Result<(), MemoryError> {
        let fd = self.uffd.as_raw_fd();
        let mut p = first.0;
        let end = first.0 + count;
        let mut populated = false;
        let mut busy = 0u32;
        while p < end {
            let start = self.addr_of(PageId(p));
            let len = (end - p) as usize * PAGE_SIZE;
            let kerr = |op, source| MemoryError::Kernel {
                op,
                page: PageId(p),
                count: end - p,
                source,
            };
            match sys::uffd_continue(fd, start, len, wp) {
                (Ok(()), _) => return Ok(()),
                (Err(e), mapped) => {
                    let done = (mapped.max(0) as usize / PAGE_SIZE) as u64;
                    if done > 0 {
                        p += done;
                        populated = false;
                        continue;
                    }
                    match errno(&e) {
                        // The mm is changing under us (or a signal): try again, boundedly.
                        libc::EAGAIN | libc::EINTR if busy < 1000 => {
                            busy += 1;
                            std::thread::yield_now();
                        }
                        // No memfd page yet: allocate zeroed pages for the rest, then retry.
                        libc::EFAULT | libc::ENOENT if !populated => {
                            sys::populate(self.memfd.as_raw_fd(), p as usize * PAGE_SIZE, len)
                                .map_err(|e| kerr("fallocate", e))?;
                            populated = true;
                        }
                        // Still missing after the populate: the run crosses a boundary of
                        // the application view's mappings (UFFDIO_CONTINUE works inside one;
                        // e.g. the C API's guard page below a thread stack, mprotect'ed
                        // PROT_NONE, splits the view): one page at a time.
                        libc::EFAULT | libc::ENOENT if end - p > 1 => {
                            for q in p..end {
                                self.map_run(PageId(q), 1, wp)?;
                            }
                            return Ok(());
                        }
                        // Already mapped (cannot happen while the table is right, but the
                        // right answer is simple): set its protection and wake.
                        libc::EEXIST => {
                            retry(|| sys::uffd_writeprotect(fd, start, PAGE_SIZE, wp))
                                .map_err(|e| kerr("writeprotect", e))?;
                            retry(|| sys::uffd_wake(fd, start, PAGE_SIZE))
                                .map_err(|e| kerr("wake", e))?;
                            p += 1;
                            populated = false;
                        }
                        _ => return Err(kerr("continue", e)),
                    }
                }
            }
        }
        Ok(())
    }

    /// Get `page` ready to receive contents through the backdoor: allocate its backing memory
    /// (zeroed, if it has none) and map it in the backdoor view, so the later write of a
    /// fetched copy takes no page fault (which costs a few microseconds on a fresh page).
    /// The runtime calls this while a page request is out, off the fault's critical path.
    /// Contents are unchanged; a page already prepared costs nothing. Best effort: a kernel
    /// without `MADV_POPULATE_WRITE` just skips it (the write then allocates the page).
    pub fn prepare_install(&self, page: PageId) -> Result<(), MemoryError> {
        self.check(page, 1)?;
        if self.table.backed(page.0) || !self.populate_ok.load(Ordering::Relaxed) {
            return Ok(());
        }
        match sys::populate_mapping(self.backdoor_addr(page, 0, PAGE_SIZE), PAGE_SIZE) {
            Ok(()) => {
                self.table.set_backed(page.0, true);
                Ok(())
            }
            Err(e) if matches!(errno(&e), libc::EINVAL | libc::EOPNOTSUPP) => {
                self.populate_ok.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(source) => Err(MemoryError::Kernel {
                op: "madvise populate-write",
                page,
                count: 1,
                source,
            }),
        }
    }

    /// Wake threads blocked on faults of `page` so they retry their access (the runtime calls
    /// this on a protocol `Resume`; `set_access` already wakes on every grant).
    pub fn wake(&self, page: PageId) -> Result<(), MemoryError> {
        self.check(page, 1)?;
        retry(|| sys::uffd_wake(self.uffd.as_raw_fd(), self.addr_of(page), PAGE_SIZE)).map_err(
            |source| MemoryError::Kernel {
                op: "wake",
                page,
                count: 1,
                source,
            },
        )
    }

    /// Wake threads blocked on faults of `page` unless the kernel already did since the last
    /// fault message on it was read (a grant or wake through this space): what the runtime
    /// calls when the protocol resumes a fault, saving a system call per fault that changed
    /// the page's access. Waking more than needed is harmless; less would hang the thread, so
    /// the bit is set before every waking kernel call and cleared as each fault is read.
    pub fn resume(&self, page: PageId) -> Result<(), MemoryError> {
        self.check(page, 1)?;
        if self.cfg.signal_faults {
            // Nobody waits in the kernel: the faulting threads wait for this.
            self.wake_waiters();
            return Ok(());
        }
        if self.table.woken(page.0) {
            return Ok(());
        }
        self.wake(page)
    }

    /// Give back the physical memory of `count` pages from `first` after they were freed: the
    /// memfd pages are punched out (both views read zeros afterwards) and the pages become
    /// `Access::None`.
    pub fn release_pages(&self, first: PageId, count: u64) -> Result<(), MemoryError> {
        self.check(first, count)?;
        if count == 0 {
            return Ok(());
        }
        if self.run_limit(first.0, first.0 + count) != first.0 + count
            || self.adopted_page(self.addr_of(first)).is_some()
        {
            return Err(MemoryError::Adopt {
                start: self.addr_of(first),
                len: count as usize * PAGE_SIZE,
                why: format!(
                    "{first} ({count} pages) overlaps the adopted region, which is never released"
                ),
            });
        }
        let start = self.addr_of(first);
        let len = count as usize * PAGE_SIZE;
        sys::punch_hole(self.memfd.as_raw_fd(), first.0 as usize * PAGE_SIZE, len).map_err(
            |source| MemoryError::Kernel {
                op: "fallocate punch-hole",
                page: first,
                count,
                source,
            },
        )?;
        sys::zap(start, len).map_err(|source| MemoryError::Kernel {
            op: "madvise",
            page: first,
            count,
            source,
        })?;
        for p in first.0..first.0 + count {
            self.table.set(p, Access::None);
            self.table.set_backed(p, false);
        }
        Ok(())
    }

    /// Start the node's fault thread: it reads fault messages and calls `on_fault` for each (on
    /// the fault thread; the callback should post the fault to the service thread and return).
    /// One fault thread per address space; it stops when the returned handle is dropped.
    pub fn start_fault_thread(
        self: &Arc<Self>,
        on_fault: impl Fn(Fault) + Send + Sync + 'static,
    ) -> Result<FaultThread, MemoryError> {
        if self.fault_thread_running.swap(true, Ordering::AcqRel) {
            return Err(MemoryError::FaultThreadRunning);
        }
        let stop = match sys::eventfd() {
            Ok(s) => Arc::new(s),
            Err(e) => {
                self.fault_thread_running.store(false, Ordering::Release);
                return Err(MemoryError::Spawn(e));
            }
        };
        let space = Arc::clone(self);
        let stop2 = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("squall-faults".into())
            .spawn(move || space.fault_loop(&stop2, &on_fault));
        match handle {
            Ok(h) => Ok(FaultThread {
                stop,
                handle: Some(h),
                space: Arc::clone(self),
            }),
            Err(e) => {
                self.fault_thread_running.store(false, Ordering::Release);
                Err(MemoryError::Spawn(e))
            }
        }
    }

    /// Take the fault stream for an external event loop (the runtime's service thread polls
    /// the userfaultfd beside its sockets, so the thread a fault wakes is the one that also
    /// receives the page's reply). Exclusive with [`start_fault_thread`](Self::start_fault_thread):
    /// one consumer per address space; dropping the source gives the stream back.
    pub fn fault_source(self: &Arc<Self>) -> Result<FaultSource, MemoryError> {
        if self.fault_thread_running.swap(true, Ordering::AcqRel) {
            return Err(MemoryError::FaultThreadRunning);
        }
        Ok(FaultSource {
            space: Arc::clone(self),
        })
    }

    fn fault_loop(&self, stop: &OwnedFd, on_fault: &dyn Fn(Fault)) {
        let fd = self.uffd.as_raw_fd();
        loop {
            let (ready, stopping) = match sys::poll2(fd, stop.as_raw_fd()) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("squall: fault thread cannot poll the userfaultfd: {e}; aborting");
                    std::process::abort();
                }
            };
            if stopping {
                return;
            }
            if ready {
                if let Err(e) = self.drain_faults(&mut |f| on_fault(f)) {
                    eprintln!("squall: fault thread: {e}; aborting");
                    std::process::abort();
                }
            }
        }
    }

    /// Read every pending fault message (the fd is non-blocking) and hand each fault on the
    /// global range to `on_fault`. Returns how many faults it handed over. A panicking callback
    /// aborts the process: the faulting thread would otherwise wait forever.
    fn drain_faults(&self, on_fault: &mut dyn FnMut(Fault)) -> Result<usize, MemoryError> {
        let fd = self.uffd.as_raw_fd();
        let mut n = 0;
        loop {
            let msg = match sys::uffd_read(fd) {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(MemoryError::Kernel {
                        op: "read userfaultfd",
                        page: PageId(0),
                        count: 0,
                        source,
                    })
                }
            };
            if msg.event != sys::UFFD_EVENT_PAGEFAULT {
                continue;
            }
            let addr = msg.address as usize;
            let Some(page) = self.page_of(addr) else {
                continue;
            };
            // A thread is blocked on `page` from now on, until the next waking kernel call.
            self.table.set_woken(page.0, false);
            let write =
                msg.flags & (sys::UFFD_PAGEFAULT_FLAG_WRITE | sys::UFFD_PAGEFAULT_FLAG_WP) != 0;
            self.count_fault(write);
            let fault = Fault {
                page,
                addr,
                write,
                tid: msg.ptid,
            };
            n += 1;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_fault(fault)));
            if r.is_err() {
                // The faulting thread would wait forever: end the process loudly instead.
                eprintln!(
                    "squall: the fault callback panicked on {page} (address {addr:#x}); aborting"
                );
                std::process::abort();
            }
        }
    }
}

/// The fault stream of an address space for an external event loop (see
/// [`AddressSpace::fault_source`]): register [`fd`](Self::fd) for readability (edge or level
/// triggered) and call [`drain`](Self::drain) whenever it is readable. Dropping it lets a fault
/// thread or another source take the stream; faulting threads stay blocked meanwhile.
pub struct FaultSource {
    space: Arc<AddressSpace>,
}

impl std::fmt::Debug for FaultSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultSource").finish_non_exhaustive()
    }
}

impl FaultSource {
    /// The userfaultfd to poll (non-blocking; readable while fault messages are pending).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.space.uffd.as_raw_fd()
    }

    /// Hand every pending fault to `on_fault` without blocking, until the kernel has none
    /// left (what an edge-triggered poll needs). Returns how many faults were handed over.
    /// An error means the userfaultfd itself failed (the node cannot serve faults any more).
    pub fn drain(&self, mut on_fault: impl FnMut(Fault)) -> Result<usize, MemoryError> {
        self.space.drain_faults(&mut on_fault)
    }
}

impl AsRawFd for FaultSource {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd()
    }
}

impl Drop for FaultSource {
    fn drop(&mut self) {
        self.space
            .fault_thread_running
            .store(false, Ordering::Release);
    }
}

/// Retry a userfaultfd ioctl while the kernel says the mm is changing (EAGAIN) or on EINTR.
fn retry(mut f: impl FnMut() -> io::Result<()>) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if matches!(errno(&e), libc::EAGAIN | libc::EINTR) && tries < 1000 => {
                tries += 1;
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        sys::unmap(self.cfg.base, self.cfg.size);
        sys::unmap(self.backdoor, self.cfg.size);
    }
}

impl PageMemory for AddressSpace {
    fn read_page(&self, page: PageId, out: &mut [u8]) {
        let src = self.backdoor_addr(page, 0, out.len());
        sys::copy_from_mapping(src, out);
    }

    fn page_equals(&self, page: PageId, data: &[u8]) -> bool {
        let src = self.backdoor_addr(page, 0, data.len());
        sys::mapping_equals(src, data)
    }

    fn write_bytes(&self, page: PageId, offset: usize, data: &[u8]) {
        let dst = self.backdoor_addr(page, offset, data.len());
        sys::copy_to_mapping(dst, data);
    }

    /// Panics if the kernel refuses a userfaultfd operation on a registered range (a broken
    /// invariant, not an input error); use [`AddressSpace::set_access_range`] for a `Result`.
    fn set_access(&self, page: PageId, access: Access) {
        if let Err(e) = self.set_access_range(page, 1, access) {
            panic!("cannot set {page} to {access:?}: {e}");
        }
    }

    /// One kernel call per run of pages sharing a previous state (see
    /// [`AddressSpace::set_access_range`]); panics like [`set_access`](Self::set_access).
    fn set_access_run(&self, first: PageId, count: u64, access: Access) {
        if let Err(e) = self.set_access_range(first, count, access) {
            panic!("cannot set {count} pages from {first} to {access:?}: {e}");
        }
    }

    fn access(&self, page: PageId) -> Access {
        self.table.get(page.0)
    }
}

/// The running fault thread; dropping it stops and joins the thread (faulting threads stay
/// blocked until a later `set_access`/`wake`).
pub struct FaultThread {
    stop: Arc<OwnedFd>,
    handle: Option<JoinHandle<()>>,
    space: Arc<AddressSpace>,
}

impl std::fmt::Debug for FaultThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultThread").finish_non_exhaustive()
    }
}

impl Drop for FaultThread {
    fn drop(&mut self) {
        let _ = sys::eventfd_signal(self.stop.as_raw_fd());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.space
            .fault_thread_running
            .store(false, Ordering::Release);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn space_is_shareable_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<AddressSpace>();
        send_sync::<Fault>();
        send_sync::<FaultThread>();
    }

    #[test]
    fn parses_env_values() {
        assert_eq!(parse_addr("0x5000_0000_0000"), Some(0x5000_0000_0000));
        assert_eq!(parse_addr("4096"), Some(4096));
        assert_eq!(parse_addr("zz"), None);
        assert_eq!(parse_size("64G"), Some(64 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("16KiB"), Some(16 << 10));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("8192"), Some(8192));
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn config_from_lookup() {
        let cfg = SpaceConfig::from_lookup(|_| None).unwrap();
        assert_eq!(cfg, SpaceConfig::default());
        let cfg = SpaceConfig::from_lookup(|k| match k {
            "SQUALL_HEAP_BASE" => Some("0x6000_0000_0000".into()),
            "SQUALL_HEAP_SIZE" => Some("1G".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.base, 0x6000_0000_0000);
        assert_eq!(cfg.size, 1 << 30);
        let err = SpaceConfig::from_lookup(|k| (k == "SQUALL_HEAP_SIZE").then(|| "lots".into()))
            .unwrap_err();
        assert!(err.to_string().contains("SQUALL_HEAP_SIZE"), "{err}");
        let err = SpaceConfig::from_lookup(|k| (k == "SQUALL_HEAP_BASE").then(|| "0x1001".into()))
            .unwrap_err();
        assert!(err.to_string().contains("page size"), "{err}");
    }
}
