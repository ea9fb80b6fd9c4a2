//! Fault capture and page access control, exercised across separate OS processes: each test
//! re-runs this test binary as child processes (the environment variable `SQUALL_MEMORY_ROLE`
//! selects the child's part) that reserve the same global base address.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use squall_core::{Access, PageId, PageMemory, PAGE_SIZE};
use squall_memory::{AddressSpace, Fault, SpaceConfig};
use std::io::{BufRead, Write};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod common;
use common::{child, finish, ROLE};
const BASE: usize = 0x5000_0000_0000;

fn space(size: usize) -> Arc<AddressSpace> {
    AddressSpace::reserve(&SpaceConfig {
        base: BASE,
        size,
        user_mode_only: false,
        signal_faults: false,
    })
    .expect("reserve the global range")
}

/// Run a child with piped output, bounded by [`finish`].
fn run(mut c: Command, who: &str) -> Output {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, who)
}

fn check(out: &Output, who: &str) {
    assert!(
        out.status.success(),
        "{who} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn app_read(addr: usize) -> u8 {
    // SAFETY: `addr` lies in the reserved application view; reading it blocks on a fault until
    // the page is granted.
    unsafe { std::ptr::read_volatile(addr as *const u8) }
}

fn app_write(addr: usize, v: u8) {
    // SAFETY: as `app_read`; the test owns the page.
    unsafe { std::ptr::write_volatile(addr as *mut u8, v) }
}

fn app_page(addr: usize) -> Vec<u8> {
    (0..PAGE_SIZE).map(|i| app_read(addr + i)).collect()
}

/// Child A: fault on its own writes, grant itself ReadWrite, send the page to B on stdout.
fn page_writer() {
    let s = space(64 << 20);
    let page = PageId(5);
    let s2 = Arc::clone(&s);
    let _ft = s
        .start_fault_thread(move |f: Fault| {
            assert_eq!(f.page, PageId(5), "unexpected fault {f:?}");
            s2.set_access(f.page, Access::ReadWrite);
        })
        .unwrap();
    let addr = s.addr_of(page);
    for (i, b) in pattern(7).into_iter().enumerate() {
        app_write(addr + i, b);
    }
    assert_eq!(s.access(page), Access::ReadWrite);
    assert!(s.stats().faults >= 1);
    let mut via_backdoor = vec![0u8; PAGE_SIZE];
    s.read_page(page, &mut via_backdoor);
    assert_eq!(via_backdoor, pattern(7));
    // The in-place compare a release uses sees the application's writes too.
    assert!(s.page_equals(page, &pattern(7)));
    assert!(!s.page_equals(page, &pattern(8)));
    let hex: String = via_backdoor.iter().map(|b| format!("{b:02x}")).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "SQUALL-PAGE {hex}").unwrap();
    out.flush().unwrap();
}

/// Child B: an app thread reads the page (fault; the "service" installs A's bytes and grants
/// Read), writes it (WP fault; granted), then after an invalidation re-reads it (fault again).
fn page_reader() {
    let mut bytes = None;
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("SQUALL-PAGE ") {
            let hex = line[at + "SQUALL-PAGE ".len()..].trim();
            let v: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            bytes = Some(v);
        }
    }
    let bytes = bytes.expect("the page from child A");
    assert_eq!(bytes, pattern(7));

    let s = space(64 << 20);
    let page = PageId(5);
    let (tx, rx) = mpsc::channel::<Fault>();
    let _ft = s.start_fault_thread(move |f| tx.send(f).unwrap()).unwrap();
    let addr = s.addr_of(page);
    let (step_tx, step_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let app = std::thread::spawn(move || {
        assert_eq!(app_page(addr), pattern(7), "first read sees A's bytes");
        app_write(addr + 10, 0xEE);
        assert_eq!(app_read(addr + 10), 0xEE);
        done_tx.send(()).unwrap();
        step_rx.recv().unwrap();
        // Invalidated now: this read faults again and sees the data kept in the memfd.
        assert_eq!(app_read(addr + 10), 0xEE);
        assert_eq!(app_read(addr + 11), pattern(7)[11]);
    });
    // Service side.
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("read fault");
    assert_eq!((f.page, f.write), (page, false), "{f:?}");
    assert_eq!(s.access(page), Access::None);
    s.write_bytes(page, 0, &bytes);
    s.set_access(page, Access::Read);
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("write fault");
    assert_eq!((f.page, f.write), (page, true), "{f:?}");
    assert_eq!(f.addr, addr + 10, "exact fault address");
    assert_eq!(s.access(page), Access::Read);
    s.set_access(page, Access::ReadWrite);
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("app thread wrote");
    s.set_access(page, Access::None);
    step_tx.send(()).unwrap();
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("fault after invalidation");
    assert_eq!((f.page, f.write), (page, false), "{f:?}");
    s.set_access(page, Access::Read);
    app.join().unwrap();
    assert!(rx.try_recv().is_err(), "no further faults");
    let st = s.stats();
    assert_eq!((st.faults, st.write_faults), (3, 1), "{st:?}");
}

#[test]
fn page_moves_between_two_processes() {
    match std::env::var(ROLE).as_deref() {
        Ok("writer") => return page_writer(),
        Ok("reader") => return page_reader(),
        _ => {}
    }
    let test = "page_moves_between_two_processes";
    let mut a = child(test, "writer")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = child(test, "reader")
        .stdin(a.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = finish(b, "child B (reader)");
    let a = finish(a, "child A (writer)");
    check(&a, "child A (writer)");
    check(&b, "child B (reader)");
}

/// Four threads fault on one page at once; one grant resumes them all.
fn many_waiters() {
    let s = space(16 << 20);
    let page = PageId(3);
    let seen = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<Fault>();
    let _ft = s.start_fault_thread(move |f| tx.send(f).unwrap()).unwrap();
    let addr = s.addr_of(page);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let v = app_read(addr + i * 100);
                seen.fetch_add(1, Ordering::SeqCst);
                v
            })
        })
        .collect();
    let first = rx.recv_timeout(Duration::from_secs(10)).expect("a fault");
    assert_eq!(first.page, page);
    // Let the others block too.
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut reports = 1;
    while Instant::now() < deadline {
        if rx.recv_timeout(Duration::from_millis(20)).is_ok() {
            reports += 1;
        }
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "nobody passes before the grant"
    );
    s.write_bytes(page, 0, &[9u8; PAGE_SIZE]);
    s.set_access(page, Access::Read);
    for t in threads {
        assert_eq!(t.join().unwrap(), 9);
    }
    assert_eq!(seen.load(Ordering::SeqCst), 4);
    println!("4 waiters: {reports} fault reports before the grant");
    assert!((1..=4).contains(&reports));
}

#[test]
fn one_grant_resumes_all_waiters() {
    if std::env::var(ROLE).is_ok() {
        return many_waiters();
    }
    let out = run(child("one_grant_resumes_all_waiters", "waiters"), "waiters");
    check(&out, "child (waiters)");
}

/// A wild access outside the range is an ordinary segfault, even with the fault thread on.
fn wild_access() {
    let s = space(16 << 20);
    let _ft = s.start_fault_thread(|_| {}).unwrap();
    let outside = s.base() + s.size() + 64 * PAGE_SIZE;
    assert!(!s.contains(outside));
    app_read(outside);
    unreachable!("the read above kills the process");
}

#[test]
fn faults_outside_the_range_are_segfaults() {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var(ROLE).is_ok() {
        wild_access();
        return;
    }
    let out = run(
        child("faults_outside_the_range_are_segfaults", "wild"),
        "wild",
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "child should die of SIGSEGV: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Released pages read as zeros and fault again (MISSING path); a reservation at an occupied
/// address names the address.
fn release_and_errors() {
    let s = space(16 << 20);
    let _ft = {
        let s2 = Arc::clone(&s);
        s.start_fault_thread(move |f| s2.set_access(f.page, Access::ReadWrite))
            .unwrap()
    };
    let addr = s.addr_of(PageId(8));
    for i in 0..4 * PAGE_SIZE {
        app_write(addr + i, 0x5A);
    }
    s.release_pages(PageId(8), 4).unwrap();
    for p in 8..12 {
        assert_eq!(s.access(PageId(p)), Access::None);
    }
    assert_eq!(
        app_read(addr + PAGE_SIZE + 7),
        0,
        "released pages read as zero"
    );
    let mut out = vec![1u8; PAGE_SIZE];
    s.read_page(PageId(9), &mut out);
    assert!(out.iter().all(|&b| b == 0));
    assert!(
        s.start_fault_thread(|_| {}).is_err(),
        "one fault thread per space"
    );
    let e = AddressSpace::reserve(&SpaceConfig {
        base: BASE,
        size: 16 << 20,
        user_mode_only: false,
        signal_faults: false,
    })
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("0x500000000000") && msg.contains("SQUALL_HEAP_BASE"),
        "{msg}"
    );
    assert!(s.set_access_range(PageId(4090), 10, Access::Read).is_err());
}

#[test]
fn release_gives_zeros_and_errors_name_the_address() {
    if std::env::var(ROLE).is_ok() {
        return release_and_errors();
    }
    let out = run(
        child("release_gives_zeros_and_errors_name_the_address", "release"),
        "release",
    );
    check(&out, "child (release)");
}

/// 1 GiB with page states cycling None/Read/ReadWrite: the process keeps a handful of
/// mappings (no VMA per page), and every state is what was asked.
fn alternating_gib() {
    let size = 1usize << 30;
    let s = space(size);
    let pages = s.total_pages();
    let state = |p: u64| match p % 3 {
        0 => Access::None,
        1 => Access::Read,
        _ => Access::ReadWrite,
    };
    let maps_before = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count();
    let t = Instant::now();
    for p in 0..pages {
        s.set_access(PageId(p), state(p));
    }
    let first = t.elapsed();
    // Rotate every page to the next state: exercises every transition kind.
    let t = Instant::now();
    for p in 0..pages {
        s.set_access(PageId(p), state(p + 1));
    }
    let second = t.elapsed();
    let maps_after = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count();
    for p in (0..pages).step_by(997) {
        assert_eq!(s.access(PageId(p)), state(p + 1));
    }
    println!(
        "1 GiB, {pages} pages: first pass {:.2} us/page, rotation {:.2} us/page; maps {maps_before} -> {maps_after}",
        first.as_secs_f64() * 1e6 / pages as f64,
        second.as_secs_f64() * 1e6 / pages as f64
    );
    assert!(
        maps_after <= maps_before + 4,
        "map count grew from {maps_before} to {maps_after}"
    );
    s.release_pages(PageId(0), pages).unwrap();
}

#[test]
fn gib_of_alternating_states_keeps_map_count_small() {
    if std::env::var(ROLE).is_ok() {
        return alternating_gib();
    }
    let out = run(
        child("gib_of_alternating_states_keeps_map_count_small", "gib"),
        "gib",
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    check(&out, "child (1 GiB)");
}

/// System calls that touch a non-resident shared page wait for the grant like threads do
/// (write(2) reading from the application view), and mixed-state ranges change in one call.
fn kernel_access_and_ranges() {
    let s = space(16 << 20);
    let (tx, rx) = mpsc::channel::<Fault>();
    let _ft = s.start_fault_thread(move |f| tx.send(f).unwrap()).unwrap();
    let page = PageId(2);
    let addr = s.addr_of(page);
    s.write_bytes(page, 0, &pattern(3));
    let writer = std::thread::spawn(move || {
        let (r, mut w) = std::io::pipe().unwrap();
        // SAFETY: the slice lies in the reserved range; the kernel's copy of it from user
        // memory faults and waits for the grant.
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, PAGE_SIZE) };
        w.write_all(src).unwrap();
        drop(w);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut &r, &mut got).unwrap();
        got
    });
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("kernel-mode fault");
    assert_eq!((f.page, f.write), (page, false), "{f:?}");
    s.set_access(page, Access::Read);
    assert_eq!(writer.join().unwrap(), pattern(3));

    // Pages 0..8 in mixed states, then one call grants ReadWrite to all of them.
    s.set_access(PageId(0), Access::ReadWrite);
    s.set_access(PageId(5), Access::Read);
    s.set_access_range(PageId(0), 8, Access::ReadWrite).unwrap();
    for p in 0..8 {
        assert_eq!(s.access(PageId(p)), Access::ReadWrite);
        app_write(s.addr_of(PageId(p)) + 1, p as u8);
    }
    assert!(rx.try_recv().is_err(), "granted pages do not fault");
    let mut out = vec![0u8; PAGE_SIZE];
    s.read_page(PageId(2), &mut out);
    assert_eq!(out[1], 2);
    assert_eq!(out[2], pattern(3)[2]);
    s.set_access_range(PageId(0), 8, Access::None).unwrap();
    assert_eq!(s.access(PageId(5)), Access::None);
    let reader = std::thread::spawn(move || app_read(addr + 1));
    let f = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("fault after range invalidation");
    assert_eq!(f.page, page);
    s.set_access(page, Access::Read);
    assert_eq!(reader.join().unwrap(), 2);
}

#[test]
fn kernel_accesses_wait_and_ranges_change_at_once() {
    if std::env::var(ROLE).is_ok() {
        return kernel_access_and_ranges();
    }
    let out = run(
        child("kernel_accesses_wait_and_ranges_change_at_once", "kernel"),
        "kernel",
    );
    check(&out, "child (kernel access)");
}

/// The default configuration reserves 64 GiB at the default base without committing memory.
fn default_range() {
    let cfg = SpaceConfig::default();
    let s = AddressSpace::reserve(&cfg).unwrap();
    assert_eq!((s.base(), s.size()), (0x5000_0000_0000, 64 << 30));
    assert_eq!(s.total_pages(), 16 << 20);
    let last = PageId(s.total_pages() - 1);
    s.write_bytes(last, PAGE_SIZE - 1, &[42]);
    s.set_access(last, Access::Read);
    assert_eq!(app_read(s.addr_of(last) + PAGE_SIZE - 1), 42);
    assert_eq!(s.page_of(s.base() + s.size()), None);
    assert_eq!(s.page_of(s.addr_of(last) + 5), Some(last));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        rss_kib < 200 * 1024,
        "resident set {rss_kib} KiB after reserving 64 GiB"
    );
}

#[test]
fn default_64_gib_range_commits_nothing_up_front() {
    if std::env::var(ROLE).is_ok() {
        return default_range();
    }
    let out = run(
        child("default_64_gib_range_commits_nothing_up_front", "default"),
        "default",
    );
    check(&out, "child (default range)");
}

/// Four application threads increment private counters spread over 32 pages while the
/// "service" thread grants what each fault asks and keeps invalidating and downgrading pages at
/// random: no thread hangs and no increment is lost (the data stays in the memfd throughout).
fn churn() {
    const PAGES: u64 = 32;
    const THREADS: usize = 4;
    const ROUNDS: u64 = 3000;
    let s = space(16 << 20);
    let (tx, rx) = mpsc::channel::<Fault>();
    let _ft = s.start_fault_thread(move |f| tx.send(f).unwrap()).unwrap();
    let base = s.base();
    let apps: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    let page = (r * 7 + t as u64 * 13) % PAGES;
                    let at = base + page as usize * PAGE_SIZE + t * 8;
                    // SAFETY: `at` is 8-aligned inside the reserved range and only thread `t`
                    // touches these 8 bytes; accesses block on faults until granted.
                    unsafe {
                        let v = std::ptr::read_volatile(at as *const u64);
                        std::ptr::write_volatile(at as *mut u64, v + 1);
                    }
                }
            })
        })
        .collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut served = 0u64;
    while apps.iter().any(|a| !a.is_finished()) {
        if let Ok(f) = rx.recv_timeout(Duration::from_millis(1)) {
            served += 1;
            let grant = if f.write {
                Access::ReadWrite
            } else {
                Access::Read
            };
            if s.access(f.page) != Access::ReadWrite {
                s.set_access(f.page, grant);
            } else {
                s.wake(f.page).unwrap();
            }
        }
        let victim = PageId(next() % PAGES);
        match next() % 3 {
            0 => s.set_access(victim, Access::None),
            1 if s.access(victim) == Access::ReadWrite => s.set_access(victim, Access::Read),
            _ => {}
        }
    }
    for a in apps {
        a.join().unwrap();
    }
    let mut buf = vec![0u8; PAGE_SIZE];
    let mut total = 0u64;
    for p in 0..PAGES {
        s.read_page(PageId(p), &mut buf);
        for t in 0..THREADS {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[t * 8..t * 8 + 8]);
            total += u64::from_ne_bytes(w);
        }
    }
    println!("churn: {served} faults served");
    assert_eq!(total, THREADS as u64 * ROUNDS, "lost increments");
    assert!(served > 0);
}

#[test]
fn random_invalidations_lose_no_writes_and_hang_no_thread() {
    if std::env::var(ROLE).is_ok() {
        return churn();
    }
    let out = run(
        child(
            "random_invalidations_lose_no_writes_and_hang_no_thread",
            "churn",
        ),
        "churn",
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    check(&out, "child (churn)");
}

/// Without privileges, opening userfaultfd fails with an error that says what to do, and the
/// suggested user-mode-only reservation works.
fn unprivileged() {
    // SAFETY: setuid has no memory-safety preconditions; failure (not root) leaves us
    // unprivileged already, which is what the test wants.
    let _ = unsafe { libc::setuid(65534) };
    let sysctl =
        std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
    let cfg = SpaceConfig {
        base: BASE,
        size: 1 << 20,
        user_mode_only: false,
        signal_faults: false,
    };
    match AddressSpace::reserve(&cfg) {
        Ok(_) => assert_eq!(sysctl.trim(), "1", "unprivileged open should have failed"),
        Err(e) => {
            let msg = e.to_string();
            println!("unprivileged reserve: {msg}");
            assert!(
                msg.contains("run as root") && msg.contains("vm.unprivileged_userfaultfd=1"),
                "{msg}"
            );
        }
    }
    let s = AddressSpace::reserve(&SpaceConfig {
        user_mode_only: true,
        signal_faults: false,
        ..cfg
    })
    .unwrap();
    let s2 = Arc::clone(&s);
    let _ft = s
        .start_fault_thread(move |f| s2.set_access(f.page, Access::Read))
        .unwrap();
    assert_eq!(app_read(s.addr_of(PageId(1))), 0);
}

#[test]
fn unprivileged_open_explains_what_to_do() {
    if std::env::var(ROLE).is_ok() {
        return unprivileged();
    }
    let out = run(
        child("unprivileged_open_explains_what_to_do", "nobody"),
        "nobody",
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    check(&out, "child (unprivileged)");
}

/// Wait until `fd` is readable (at most 20 ms).
fn wait_readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd, the length passed.
    let r = unsafe { libc::poll(&mut p, 1, 20) };
    r == 1 && p.revents & libc::POLLIN != 0
}

/// The fault stream served by the caller's own poll loop (as the runtime's service thread
/// does): faults of several threads on many pages, each page prepared (`prepare_install`)
/// before its contents are written through the backdoor and granted. The source excludes a
/// fault thread while it lives; `prepare_install` never changes a page's bytes.
fn external_poll() {
    let s = space(16 << 20);
    let source = s.fault_source().unwrap();
    assert!(s.start_fault_thread(|_| {}).is_err(), "one consumer");
    assert!(s.fault_source().is_err(), "one consumer");

    // prepare_install keeps contents: a written page, a hole (zeros), a granted page.
    s.write_bytes(PageId(100), 0, &pattern(1));
    s.prepare_install(PageId(100)).unwrap();
    s.prepare_install(PageId(100)).unwrap();
    let mut out = vec![1u8; PAGE_SIZE];
    s.read_page(PageId(100), &mut out);
    assert_eq!(out, pattern(1));
    s.prepare_install(PageId(101)).unwrap();
    s.read_page(PageId(101), &mut out);
    assert!(out.iter().all(|&b| b == 0), "a prepared hole reads zeros");
    assert!(s.prepare_install(PageId(1 << 30)).is_err(), "out of range");

    const PAGES: u64 = 64;
    const THREADS: u64 = 4;
    let served = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let service = {
        let (s, served, stop) = (Arc::clone(&s), Arc::clone(&served), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if !wait_readable(source.fd()) {
                    continue;
                }
                // Drain everything (edge-triggered pollers see no second event otherwise).
                source
                    .drain(|f| {
                        assert!(f.page.0 < PAGES, "unexpected fault {f:?}");
                        if s.access(f.page) == Access::None {
                            s.prepare_install(f.page).unwrap();
                            s.write_bytes(f.page, 0, &pattern(f.page.0 as u8));
                            served.fetch_add(1, Ordering::SeqCst);
                        }
                        s.set_access(f.page, Access::Read);
                    })
                    .unwrap();
            }
            source
        })
    };
    let apps: Vec<_> = (0..THREADS)
        .map(|t| {
            let base = s.addr_of(PageId(0));
            std::thread::spawn(move || {
                // Every thread reads every page, starting at a different one.
                for i in 0..PAGES {
                    let p = (i + t * PAGES / THREADS) % PAGES;
                    let addr = base + p as usize * PAGE_SIZE;
                    let want = pattern(p as u8);
                    for off in [0, 17, PAGE_SIZE - 1] {
                        assert_eq!(app_read(addr + off), want[off], "page {p} byte {off}");
                    }
                }
            })
        })
        .collect();
    for a in apps {
        a.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let source = service.join().unwrap();
    assert_eq!(
        served.load(Ordering::SeqCst),
        PAGES as usize,
        "each page served once"
    );
    assert!(s.stats().faults >= PAGES);
    drop(source);
    let _ft = s
        .start_fault_thread(|_| {})
        .expect("the stream is free again once the source is dropped");
}

#[test]
fn faults_served_from_an_external_poll_loop() {
    if std::env::var(ROLE).is_ok() {
        return external_poll();
    }
    let out = run(
        child("faults_served_from_an_external_poll_loop", "poll"),
        "poll",
    );
    check(&out, "child (external poll)");
}

/// Faults served by the faulting threads (`signal_faults`): the kernel raises SIGBUS in the
/// thread, the registered server grants the access and counts it, and the access then runs.
/// Reads, writes to read copies (write faults), several threads at once, a second server
/// refused, an address outside the range left to the previous SIGBUS action (none here: the
/// server says not ours, and no such access is made).
fn signal_served() {
    use squall_memory::SignalServer;
    let s = AddressSpace::reserve(&SpaceConfig {
        base: BASE,
        size: 64 * PAGE_SIZE,
        user_mode_only: false,
        signal_faults: true,
    })
    .unwrap();
    assert!(s.signal_faults());
    let seen = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let (s2, seen2) = (Arc::clone(&s), Arc::clone(&seen));
    let _server = SignalServer::register(move |addr, write| {
        let Some(page) = s2.page_of(addr) else {
            return false;
        };
        let counter = if write { &seen2.1 } else { &seen2.0 };
        counter.fetch_add(1, Ordering::Relaxed);
        let want = if write {
            Access::ReadWrite
        } else {
            Access::Read
        };
        if s2.access(page) != want {
            s2.set_access(page, want);
        }
        true
    })
    .unwrap();
    assert!(
        SignalServer::register(|_, _| false).is_err(),
        "a second server in one process"
    );
    s.write_bytes(PageId(3), 0, &pattern(7));
    // A read fault, then a write fault on the read copy.
    let a = s.addr_of(PageId(3));
    assert_eq!(app_read(a + 5), pattern(7)[5]);
    assert_eq!(s.access(PageId(3)), Access::Read);
    // SAFETY: inside the application view; the write faults until the server grants it.
    unsafe { std::ptr::write_volatile((a + 9) as *mut u8, 0xee) };
    let mut back = vec![0u8; PAGE_SIZE];
    s.read_page(PageId(3), &mut back);
    assert_eq!(back[9], 0xee, "the write landed in the node's copy");
    assert_eq!(seen.0.load(Ordering::Relaxed), 1, "one read fault");
    assert_eq!(seen.1.load(Ordering::Relaxed), 1, "one write fault");
    // Threads writing their own pages at once, each on its own alternate stack.
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                squall_memory::prepare_thread().unwrap();
                for p in 0..8u64 {
                    let page = PageId(10 + t * 8 + p);
                    // SAFETY: inside the application view; served by the handler.
                    unsafe { std::ptr::write_volatile(s.addr_of(page) as *mut u64, t * 100 + p) };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4u64 {
        for p in 0..8u64 {
            let mut v = vec![0u8; PAGE_SIZE];
            s.read_page(PageId(10 + t * 8 + p), &mut v);
            assert_eq!(u64::from_ne_bytes(v[..8].try_into().unwrap()), t * 100 + p);
        }
    }
    assert_eq!(
        seen.1.load(Ordering::Relaxed),
        1 + 32,
        "one write fault per page"
    );
    println!("signal faults ok");
}

#[test]
fn faults_served_by_signal_in_the_faulting_thread() {
    if std::env::var(ROLE).is_ok() {
        return signal_served();
    }
    let out = run(
        child("faults_served_by_signal_in_the_faulting_thread", "signal"),
        "signal",
    );
    check(&out, "child (signal)");
    assert!(String::from_utf8_lossy(&out.stdout).contains("signal faults ok"));
}
