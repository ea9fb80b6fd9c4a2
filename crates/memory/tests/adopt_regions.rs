//! Several adopted regions at once, as the pthreads layer adopts a program's `squall_data`
//! (initialised) and `squall_bss` (zero-initialised) sections: consecutive page numbers across
//! the regions, initialised bytes and bytes written into the bss before the adoption carried
//! into the backing memory, untouched bss pages left as zeros that were never read (they stay
//! non-resident), and the regions usable as plain memory after `detach`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use squall_core::{PageId, PageMemory, PAGE_SIZE};
use squall_memory::{AddressSpace, Contents, Region, SpaceConfig};
use std::cell::UnsafeCell;

const BASE: usize = 0x5200_0000_0000;
const DATA_PAGES: usize = 3;
const BSS_PAGES: usize = 64;
const FIRST: PageId = PageId(2000);

#[repr(C, align(4096))]
struct Data(UnsafeCell<[u8; DATA_PAGES * PAGE_SIZE]>);
// SAFETY: only this test's one thread touches it.
unsafe impl Sync for Data {}

#[repr(C, align(4096))]
struct Bss(UnsafeCell<[u8; BSS_PAGES * PAGE_SIZE]>);
// SAFETY: as `Data`.
unsafe impl Sync for Bss {}

/// Page 0 and 2 non-zero, page 1 all zero (left as a hole in the memfd).
const fn initial() -> [u8; DATA_PAGES * PAGE_SIZE] {
    let mut a = [0u8; DATA_PAGES * PAGE_SIZE];
    let mut i = 0;
    while i < a.len() {
        if i / PAGE_SIZE != 1 {
            a[i] = (i % 249) as u8 + 1;
        }
        i += 1;
    }
    a
}

static DATA: Data = Data(UnsafeCell::new(initial()));
static BSS: Bss = Bss(UnsafeCell::new([0; BSS_PAGES * PAGE_SIZE]));

fn resident(addr: usize, len: usize) -> usize {
    let mut v = vec![0u8; len / PAGE_SIZE];
    // SAFETY: `v` has one byte per page of the page-aligned range, which is only queried.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore");
    v.iter().filter(|&&b| b & 1 != 0).count()
}

#[test]
fn data_and_bss_regions() {
    let (data, bss) = (DATA.0.get() as usize, BSS.0.get() as usize);
    // A constructor wrote into the bss before the node started: that page must carry over.
    // SAFETY: a plain write into this test's own static, before anything else maps it.
    unsafe { std::ptr::write_volatile((bss + 5 * PAGE_SIZE + 8) as *mut u8, 0xab) };
    assert_eq!(
        resident(bss, BSS_PAGES * PAGE_SIZE),
        1,
        "only the written bss page"
    );

    let s = AddressSpace::reserve(&SpaceConfig {
        base: BASE,
        size: 64 << 20,
        user_mode_only: false,
        signal_faults: false,
    })
    .unwrap();
    let regions = [
        Region {
            start: data,
            len: DATA_PAGES * PAGE_SIZE,
            contents: Contents::Data,
        },
        Region {
            start: bss,
            len: BSS_PAGES * PAGE_SIZE,
            contents: Contents::Zeroed,
        },
    ];
    let total = (DATA_PAGES + BSS_PAGES) as u64;
    assert_eq!(s.adopt_regions(&regions, FIRST).unwrap(), (FIRST, total));
    // Consecutive numbering across the regions, both ways.
    assert_eq!(s.page_of(data), Some(FIRST));
    assert_eq!(s.page_of(bss), Some(PageId(FIRST.0 + DATA_PAGES as u64)));
    assert_eq!(
        s.addr_of(PageId(FIRST.0 + DATA_PAGES as u64 + 5)),
        bss + 5 * PAGE_SIZE
    );
    assert_eq!(
        s.adopted_regions(),
        vec![
            (data, FIRST, DATA_PAGES as u64),
            (bss, PageId(FIRST.0 + DATA_PAGES as u64), BSS_PAGES as u64)
        ]
    );
    assert!(!s.contains(bss + BSS_PAGES * PAGE_SIZE));
    // Only the written bss page has backing memory; the zero data page has none either.
    assert_eq!(
        resident(bss, BSS_PAGES * PAGE_SIZE),
        1,
        "bss pages with memory"
    );
    assert_eq!(
        resident(data, DATA_PAGES * PAGE_SIZE),
        2,
        "data pages with memory"
    );
    // The backing memory holds the initial bytes, the zero page, the constructor's write
    // (reading a hole through the backdoor gives it memory: after the check above).
    let mut buf = vec![0u8; PAGE_SIZE];
    for p in 0..DATA_PAGES {
        s.read_page(PageId(FIRST.0 + p as u64), &mut buf);
        assert_eq!(
            buf,
            initial()[p * PAGE_SIZE..(p + 1) * PAGE_SIZE],
            "data page {p}"
        );
    }
    s.read_page(PageId(FIRST.0 + DATA_PAGES as u64 + 5), &mut buf);
    assert_eq!((buf[8], buf.iter().filter(|&&b| b != 0).count()), (0xab, 1));
    s.read_page(PageId(FIRST.0 + DATA_PAGES as u64 + 6), &mut buf);
    assert!(buf.iter().all(|&b| b == 0));
    // A second adoption is refused.
    assert!(s.adopt_regions(&regions, PageId(3000)).is_err());

    // After the end of the job the regions are plain memory with the backing bytes.
    s.detach().unwrap();
    // SAFETY: the regions are plain mappings of the memfd now; reads do not fault into
    // userfaultfd.
    let (d, b) = unsafe {
        (
            std::ptr::read_volatile((data + 2 * PAGE_SIZE + 3) as *const u8),
            std::ptr::read_volatile((bss + 5 * PAGE_SIZE + 8) as *const u8),
        )
    };
    assert_eq!((d, b), (initial()[2 * PAGE_SIZE + 3], 0xab));
}

#[test]
fn overlapping_regions_are_refused() {
    let s = AddressSpace::reserve(&SpaceConfig {
        base: BASE + (1 << 30),
        size: 64 << 20,
        user_mode_only: false,
        signal_faults: false,
    })
    .unwrap();
    // Two regions over the same (unmapped, never touched) address: refused before any mapping.
    let at = 0x5300_0000_0000;
    let r = Region {
        start: at,
        len: 2 * PAGE_SIZE,
        contents: Contents::Zeroed,
    };
    let e = s
        .adopt_regions(
            &[
                r,
                Region {
                    start: at + PAGE_SIZE,
                    ..r
                },
            ],
            FIRST,
        )
        .unwrap_err();
    assert!(e.to_string().contains("overlaps another region"), "{e}");
    assert!(s.adopt_regions(&[], FIRST).is_err());
}

#[test]
fn runs_across_a_protected_page_are_installed() {
    // The C API's guard page below a thread stack is mprotect'ed PROT_NONE, which splits the
    // application view: a grant of a run of pages across it must still be installed.
    let base = BASE + (2 << 30);
    let s = AddressSpace::reserve(&SpaceConfig {
        base,
        size: 64 << 20,
        user_mode_only: false,
        signal_faults: false,
    })
    .unwrap();
    let guard = base + 11 * PAGE_SIZE;
    // SAFETY: one page of this test's own reserved range.
    let r = unsafe { libc::mprotect(guard as *mut libc::c_void, PAGE_SIZE, libc::PROT_NONE) };
    assert_eq!(r, 0);
    s.set_access_range(PageId(8), 8, squall_core::Access::Read)
        .unwrap();
    // The pages on both sides are readable without a fault server (they are mapped).
    // SAFETY: mapped pages of the range.
    let (a, b) = unsafe {
        (
            std::ptr::read_volatile((base + 8 * PAGE_SIZE) as *const u8),
            std::ptr::read_volatile((base + 15 * PAGE_SIZE) as *const u8),
        )
    };
    assert_eq!((a, b), (0, 0));
}
