//! Adopted regions across two OS processes: a page-aligned static of this test binary (standing
//! in for a C program's `squall_globals` section) is adopted into the global range by both
//! processes; process A writes it through the program's own address (faults served by granting
//! itself access) and sends the page through its backdoor; process B's reads fault, the
//! "service" side installs A's bytes through the backdoor and grants, and B's thread sees A's
//! writes at the static's address. Each process is this test binary re-run with
//! `SQUALL_MEMORY_ROLE` set.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use squall_core::{Access, PageId, PageMemory, PAGE_SIZE};
use squall_memory::{AddressSpace, Fault, SpaceConfig};
use std::cell::UnsafeCell;
use std::io::{BufRead, Write};
use std::process::{Child, Output, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

mod common;
use common::{child, ROLE};
const BASE: usize = 0x5100_0000_0000;
const PAGES: usize = 3;
/// Where the region's pages are numbered (inside the 64 MiB range, as the top of node 0's arena
/// would be).
const FIRST: PageId = PageId(1000);

/// The "globals section": page aligned, whole pages, with non-zero initial values (so it lives
/// in the data section of the binary, like initialised C globals).
#[repr(C, align(4096))]
struct Region(UnsafeCell<[u8; PAGES * PAGE_SIZE]>);
// SAFETY: the test synchronises access through the fault protocol it exercises.
unsafe impl Sync for Region {}

const fn initial() -> [u8; PAGES * PAGE_SIZE] {
    let mut a = [0u8; PAGES * PAGE_SIZE];
    let mut i = 0;
    while i < a.len() {
        a[i] = (i % 251) as u8 + 1;
        i += 1;
    }
    a
}

static REGION: Region = Region(UnsafeCell::new(initial()));

fn region() -> (usize, usize) {
    (REGION.0.get() as usize, PAGES * PAGE_SIZE)
}

fn space() -> Arc<AddressSpace> {
    AddressSpace::reserve(&SpaceConfig {
        base: BASE,
        size: 64 << 20,
        user_mode_only: false,
        signal_faults: false,
    })
    .expect("reserve the global range")
}

fn read(addr: usize) -> u8 {
    // SAFETY: `addr` lies in the adopted region; a read blocks on a fault until granted.
    unsafe { std::ptr::read_volatile(addr as *const u8) }
}

fn write(addr: usize, v: u8) {
    // SAFETY: as `read`; this process owns the page while it writes.
    unsafe { std::ptr::write_volatile(addr as *mut u8, v) }
}

/// Wait for a child (see `common::finish`); it must succeed.
fn finish(c: Child, who: &str) -> Output {
    let o = common::finish(c, who);
    assert!(
        o.status.success(),
        "{who} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Process A (the home): adopt, check the numbering, write page 1 through the program address
/// (faults granted ReadWrite), send every page's backdoor bytes.
fn home() {
    let s = space();
    let (start, len) = region();
    assert_eq!(
        s.adopt_region(start, len, FIRST).unwrap(),
        (FIRST, PAGES as u64)
    );
    // Numbering both ways, heap pages unchanged.
    assert_eq!(s.page_of(start), Some(FIRST));
    assert_eq!(s.page_of(start + PAGE_SIZE + 17), Some(PageId(FIRST.0 + 1)));
    assert!(s.contains(start + len - 1));
    assert_eq!(
        s.page_of(start + len - 1),
        Some(PageId(FIRST.0 + PAGES as u64 - 1))
    );
    assert!(
        !s.contains(start + len),
        "the region ends where its last page ends"
    );
    assert!(!s.contains(start - 1));
    assert_eq!(s.addr_of(PageId(FIRST.0 + 2)), start + 2 * PAGE_SIZE);
    assert_eq!(s.addr_of(PageId(3)), BASE + 3 * PAGE_SIZE);
    assert_eq!(s.page_of(BASE + 3 * PAGE_SIZE), Some(PageId(3)));
    assert_eq!(s.access(FIRST), Access::None);
    // The backdoor holds the initial values.
    let mut buf = vec![0u8; PAGE_SIZE];
    s.read_page(PageId(FIRST.0 + 1), &mut buf);
    assert_eq!(buf, initial()[PAGE_SIZE..2 * PAGE_SIZE]);
    // A second adoption is refused; release of adopted pages too.
    assert!(s.adopt_region(start, len, PageId(2000)).is_err());
    assert!(s.release_pages(FIRST, 1).is_err());

    let s2 = Arc::clone(&s);
    let _ft = s
        .start_fault_thread(move |f: Fault| {
            assert!(
                f.page.0 >= FIRST.0 && f.page.0 < FIRST.0 + PAGES as u64,
                "unexpected fault {f:?}"
            );
            s2.set_access(f.page, Access::ReadWrite);
        })
        .unwrap();
    for i in 0..PAGE_SIZE {
        write(start + PAGE_SIZE + i, (i % 7) as u8 + 100);
    }
    // Reads of untouched pages see the initial values through the program address.
    assert_eq!(read(start), initial()[0]);
    assert_eq!(s.access(PageId(FIRST.0 + 1)), Access::ReadWrite);
    assert!(s.stats().write_faults >= 1);
    let mut out = std::io::stdout().lock();
    for p in 0..PAGES as u64 {
        s.read_page(PageId(FIRST.0 + p), &mut buf);
        let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "SQUALL-PAGE {p} {hex}").unwrap();
    }
    out.flush().unwrap();
}

/// Process B: adopt, then an application thread reads the region; each read fault is served
/// with A's bytes (Read), a write with a WP fault (ReadWrite), an invalidation with a re-fault.
fn remote() {
    let mut pages: Vec<Option<Vec<u8>>> = vec![None; PAGES];
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("SQUALL-PAGE ") {
            let mut it = line[at + "SQUALL-PAGE ".len()..].split_whitespace();
            let p: usize = it.next().unwrap().parse().unwrap();
            let hex = it.next().unwrap();
            pages[p] = Some(
                (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                    .collect(),
            );
        }
    }
    let pages: Vec<Vec<u8>> = pages.into_iter().map(|p| p.expect("page from A")).collect();
    let s = space();
    let (start, len) = region();
    s.adopt_region(start, len, FIRST).unwrap();
    let (tx, rx) = mpsc::channel::<Fault>();
    let _ft = s.start_fault_thread(move |f| tx.send(f).unwrap()).unwrap();
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let app = std::thread::spawn(move || {
        let p1: Vec<u8> = (0..PAGE_SIZE)
            .map(|i| read(start + PAGE_SIZE + i))
            .collect();
        let want: Vec<u8> = (0..PAGE_SIZE).map(|i| (i % 7) as u8 + 100).collect();
        assert_eq!(p1, want, "B sees A's writes at the static's own address");
        write(start + PAGE_SIZE + 5, 0xEE);
        done_tx.send(()).unwrap();
        step_rx.recv().unwrap();
        // Invalidated: faults again, the data stayed in this node's copy.
        assert_eq!(read(start + PAGE_SIZE + 5), 0xEE);
        assert_eq!(read(start + PAGE_SIZE + 6), want[6]);
    });
    let page1 = PageId(FIRST.0 + 1);
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("read fault");
    assert_eq!((f.page, f.write), (page1, false), "{f:?}");
    s.write_bytes(page1, 0, &pages[1]);
    s.set_access(page1, Access::Read);
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("write fault");
    assert_eq!((f.page, f.write), (page1, true), "{f:?}");
    assert_eq!(f.addr, start + PAGE_SIZE + 5, "exact fault address");
    s.set_access(page1, Access::ReadWrite);
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the application thread wrote");
    // A run crossing the region's edges (heap page, region pages, heap page) is split.
    s.set_access_range(PageId(FIRST.0 - 1), PAGES as u64 + 2, Access::None)
        .unwrap();
    assert_eq!(s.access(page1), Access::None);
    step_tx.send(()).unwrap();
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("fault after invalidation");
    assert_eq!((f.page, f.write), (page1, false), "{f:?}");
    s.set_access_range(PageId(FIRST.0 - 1), PAGES as u64 + 2, Access::Read)
        .unwrap();
    app.join().unwrap();
    // Page 0 and 2 were never fetched: the region shows B's own initial bytes once granted.
    assert_eq!(read(start), initial()[0]);
    assert_eq!(read(start + 2 * PAGE_SIZE + 9), pages[2][9]);
    assert!(rx.try_recv().is_err(), "no further faults");
}

#[test]
fn adopted_region_moves_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("home") => return home(),
        Ok("remote") => return remote(),
        _ => {}
    }
    let test = "adopted_region_moves_between_two_processes";
    let mut a = child(test, "home")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = child(test, "remote")
        .stdin(a.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(b, "process B (remote)");
    finish(a, "process A (home)");
}

#[test]
fn bad_regions_are_refused() {
    let s = space();
    let (start, len) = region();
    assert!(s.adopt_region(start + 1, len - PAGE_SIZE, FIRST).is_err());
    assert!(s.adopt_region(start, len - 1, FIRST).is_err());
    assert!(s.adopt_region(start, 0, FIRST).is_err());
    assert!(
        s.adopt_region(BASE, PAGE_SIZE, FIRST).is_err(),
        "inside the heap"
    );
    let e = s.adopt_region(start, len, PageId(1 << 40)).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    assert!(s.adopted_regions().is_empty());
}
