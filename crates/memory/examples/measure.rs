//! Measures the cost of page access changes and of a fault round trip (fault → callback →
//! service thread → `set_access` → the faulting thread resumes).
//!
//! Run: `cargo run --release -p squall-memory --example measure [pages]`

use squall_core::{Access, PageId, PageMemory};
use squall_memory::{AddressSpace, Fault, SpaceConfig};
use std::sync::{mpsc, Arc};
use std::time::Instant;

fn per_call(label: &str, n: u64, f: impl FnOnce()) {
    let t = Instant::now();
    f();
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{label:<44} {us:>8.2} us");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 20_000,
    };
    let cfg = SpaceConfig {
        size: (4 * n as usize + 16) * squall_core::PAGE_SIZE,
        ..SpaceConfig::from_env()?
    };
    let space = AddressSpace::reserve(&cfg)?;
    println!(
        "global range {:#x} + {} MiB, {n} pages per measurement",
        space.base(),
        space.size() >> 20
    );

    // Access transitions, one call per page.
    let pages = |k: u64| (k * n..(k + 1) * n).map(PageId);
    per_call("set_access None->Read (page never touched)", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::Read))
    });
    per_call("set_access Read->ReadWrite", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::ReadWrite))
    });
    per_call("set_access ReadWrite->Read", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::Read))
    });
    per_call("set_access Read->None", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::None))
    });
    per_call("set_access None->ReadWrite (page populated)", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::ReadWrite))
    });
    per_call("set_access ReadWrite->None", n, || {
        pages(0).for_each(|p| space.set_access(p, Access::None))
    });
    per_call("set_access_range None->Read, per page", n, || {
        space
            .set_access_range(PageId(0), n, Access::Read)
            .expect("range grant")
    });
    let mut buf = vec![0u8; squall_core::PAGE_SIZE];
    per_call("read_page (backdoor copy)", n, || {
        pages(0).for_each(|p| space.read_page(p, &mut buf))
    });
    per_call("write_bytes whole page (backdoor copy)", n, || {
        pages(0).for_each(|p| space.write_bytes(p, 0, &buf))
    });

    // Fault round trips through a service thread, as the runtime will do it.
    let (tx, rx) = mpsc::channel::<Fault>();
    let service_space = Arc::clone(&space);
    let service = std::thread::spawn(move || {
        for f in rx {
            let grant = if f.write {
                Access::ReadWrite
            } else {
                Access::Read
            };
            service_space.set_access(f.page, grant);
        }
    });
    let faults = space.start_fault_thread(move |f| {
        let _ = tx.send(f);
    })?;
    let addr = |p: PageId| space.addr_of(p);
    per_call("fault round trip: read, None->Read", n, || {
        for p in pages(1) {
            // SAFETY: the page is in the reserved range; the read blocks until granted.
            unsafe { std::ptr::read_volatile(addr(p) as *const u8) };
        }
    });
    per_call("fault round trip: write, Read->ReadWrite", n, || {
        for p in pages(1) {
            // SAFETY: as above; the write faults (WP) until ReadWrite is granted.
            unsafe { std::ptr::write_volatile(addr(p) as *mut u8, 1) };
        }
    });
    per_call("fault round trip: write, None->ReadWrite", n, || {
        for p in pages(2) {
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(addr(p) as *mut u8, 1) };
        }
    });
    drop(faults);

    // The floor: the fault thread grants directly (no hand-off to a service thread).
    let direct_space = Arc::clone(&space);
    let faults = space.start_fault_thread(move |f| {
        direct_space.set_access(f.page, Access::ReadWrite);
    })?;
    per_call("fault round trip, granted on the fault thread", n, || {
        for p in pages(3) {
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(addr(p) as *mut u8, 1) };
        }
    });
    let st = space.stats();
    println!(
        "faults {} (writes {}), transitions {}",
        st.faults, st.write_faults, st.transitions
    );
    drop(faults);
    drop(space);
    service.join().map_err(|_| "service thread panicked")?;
    Ok(())
}
