//! OpenMP internal control variables (ICVs), the `OMP_*` environment, the calling thread's
//! stack of team frames, and the `omp_*` API that reads and sets them.
//!
//! Every OS thread keeps a stack of [`Frame`]s: the implicit one (outside any parallel region)
//! and one per parallel region it takes part in. A frame holds the thread's number and team
//! size, nesting levels, a copy of the ICVs (a team's threads inherit the opener's, carried in
//! the team descriptor across nodes) and the state of the worksharing construct it is in.
//!
//! Owns: ICV values and their environment syntax. Must not touch: team memory (see `team`).
use super::loops::LoopState;
use std::cell::RefCell;
use std::ffi::{c_double, c_int};
use std::sync::OnceLock;

/// `omp_sched_t` kinds (the `GFS_*` of libgomp) and the monotonic modifier bit.
pub const SCHED_STATIC: u32 = 1;
pub const SCHED_DYNAMIC: u32 = 2;
pub const SCHED_GUIDED: u32 = 3;
pub const SCHED_AUTO: u32 = 4;
pub const SCHED_MONOTONIC: u32 = 0x8000_0000;

/// `omp_proc_bind_t` values.
pub const BIND_FALSE: u32 = 0;
pub const BIND_TRUE: u32 = 1;
pub const BIND_PRIMARY: u32 = 2;
pub const BIND_CLOSE: u32 = 3;
pub const BIND_SPREAD: u32 = 4;

/// The data-environment ICVs a team inherits from the thread that opens it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icv {
    /// nthreads-var: team size of the next parallel region without `num_threads`.
    pub nthreads: u32,
    /// dyn-var (accepted; teams always get the size asked for).
    pub dynamic: bool,
    /// run-sched-var: kind (`SCHED_*`, modifier bit cleared) and chunk (0: the default).
    pub sched_kind: u32,
    pub sched_chunk: u64,
    /// max-active-levels-var.
    pub max_active: u32,
    /// bind-var (`BIND_*`) for the next region.
    pub bind: u32,
}

/// What the environment says, read once per process.
#[derive(Debug)]
pub struct Defaults {
    pub icv: Icv,
    /// `OMP_STACKSIZE` in bytes (0: the pthreads layer's default, 8 MiB).
    pub stack: usize,
    /// `OMP_THREAD_LIMIT` (u32::MAX when unset).
    pub thread_limit: u32,
}

/// Processors of the whole job: the job's nodes times this node's processors.
pub fn job_procs() -> u32 {
    let nodes = squall::node_ref().map_or(1, |n| u32::from(n.size().max(1)));
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get() as u32);
    nodes.saturating_mul(cpus)
}

fn warn(var: &str, v: &str, why: &str) {
    eprintln!("squall: ignoring {var}={v:?}: {why}");
}

/// `static`, `dynamic,4`, `monotonic:guided,8`, `auto` -> (kind, chunk).
pub fn parse_schedule(v: &str) -> Option<(u32, u64)> {
    let v = v.trim().to_ascii_lowercase();
    let v = v
        .strip_prefix("monotonic:")
        .or_else(|| v.strip_prefix("nonmonotonic:"))
        .unwrap_or(&v);
    let (kind, chunk) = match v.split_once(',') {
        Some((k, c)) => (k.trim(), Some(c.trim())),
        None => (v.trim(), None),
    };
    let kind = match kind {
        "static" => SCHED_STATIC,
        "dynamic" => SCHED_DYNAMIC,
        "guided" => SCHED_GUIDED,
        "auto" => SCHED_AUTO,
        _ => return None,
    };
    let chunk = match chunk {
        Some(c) => c.parse::<u64>().ok().filter(|&c| c > 0)?,
        None => 0,
    };
    Some((kind, chunk))
}

/// `true`, `false`, `master`, `primary`, `close`, `spread` (first item of a list).
pub fn parse_bind(v: &str) -> Option<u32> {
    let first = v
        .split(',')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    Some(match first.as_str() {
        "false" => BIND_FALSE,
        "true" => BIND_TRUE,
        "master" | "primary" => BIND_PRIMARY,
        "close" => BIND_CLOSE,
        "spread" => BIND_SPREAD,
        _ => return None,
    })
}

/// `OMP_STACKSIZE`: a number with an optional B, K (the default), M or G suffix.
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, unit) = match v.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&v[..i], v[i..].trim()),
        None => (v, ""),
    };
    let n: usize = num.parse().ok()?;
    let mul = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "" | "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

fn truthy(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

fn read_defaults() -> Defaults {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let mut icv = Icv {
        nthreads: job_procs().max(1),
        dynamic: false,
        sched_kind: SCHED_DYNAMIC,
        sched_chunk: 0,
        max_active: 1,
        bind: BIND_SPREAD,
    };
    if let Some(v) = get("OMP_NUM_THREADS") {
        let first = v.split(',').next().unwrap_or("").trim();
        match first.parse::<u32>() {
            Ok(n) if n > 0 => icv.nthreads = n,
            _ => warn("OMP_NUM_THREADS", &v, "not a positive number"),
        }
        if v.contains(',') {
            // A list asks for nested parallelism, as libgomp reads it.
            icv.max_active = v.split(',').count() as u32;
        }
    }
    if let Some(v) = get("OMP_SCHEDULE") {
        match parse_schedule(&v) {
            Some((k, c)) => {
                icv.sched_kind = k;
                icv.sched_chunk = c;
            }
            None => warn(
                "OMP_SCHEDULE",
                &v,
                "use static, dynamic, guided or auto[,chunk]",
            ),
        }
    }
    if let Some(v) = get("OMP_DYNAMIC") {
        match truthy(&v) {
            Some(b) => icv.dynamic = b,
            None => warn("OMP_DYNAMIC", &v, "use true or false"),
        }
    }
    if let Some(v) = get("OMP_NESTED") {
        match truthy(&v) {
            Some(true) => icv.max_active = icv.max_active.max(u32::from(u8::MAX)),
            Some(false) => icv.max_active = 1,
            None => warn("OMP_NESTED", &v, "use true or false"),
        }
    }
    if let Some(v) = get("OMP_MAX_ACTIVE_LEVELS") {
        match v.trim().parse::<u32>() {
            Ok(n) => icv.max_active = n,
            Err(_) => warn("OMP_MAX_ACTIVE_LEVELS", &v, "not a number"),
        }
    }
    if let Some(v) = get("OMP_PROC_BIND") {
        match parse_bind(&v) {
            Some(b) => icv.bind = b,
            None => warn(
                "OMP_PROC_BIND",
                &v,
                "use spread, close, master, true or false",
            ),
        }
    }
    let stack = match get("OMP_STACKSIZE") {
        Some(v) => parse_size(&v).unwrap_or_else(|| {
            warn("OMP_STACKSIZE", &v, "use a size such as 16M");
            0
        }),
        None => 0,
    };
    let thread_limit = match get("OMP_THREAD_LIMIT") {
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| {
                warn("OMP_THREAD_LIMIT", &v, "not a positive number");
                u32::MAX
            }),
        None => u32::MAX,
    };
    Defaults {
        icv,
        stack,
        thread_limit,
    }
}

/// The environment's values (read at the first OpenMP call of the process).
pub fn defaults() -> &'static Defaults {
    static D: OnceLock<Defaults> = OnceLock::new();
    // Reading the environment allocates: on the private stack (see `crate::stack`).
    D.get_or_init(|| crate::stack::on_private(read_defaults))
}

/// One thread's view of one team (see the module doc).
#[derive(Clone, Debug)]
pub struct Frame {
    /// The team descriptor's address in Squall memory; 0 for a team of one thread.
    pub team: usize,
    pub tid: u32,
    pub nthreads: u32,
    pub level: u32,
    pub active_level: u32,
    /// (thread number, team size) at levels 1..=level.
    pub ancestors: Vec<(u32, u32)>,
    pub icv: Icv,
    /// How many slot-using worksharing constructs this thread entered in this team.
    pub ws: u64,
    /// The worksharing loop (or sections) the thread is in.
    pub lp: LoopState,
    /// The threads this (primary) thread started for the team, joined at its end.
    pub workers: Vec<u64>,
    /// The pool block of an outermost region's team (0: none).
    pub pool: usize,
    /// Inside a final task.
    pub in_final: bool,
    /// The running task's record (`deferred`; 0: none made yet) and innermost taskgroup.
    pub task: usize,
    pub group: usize,
    /// Barriers of this team the thread passed (numbering continues across a pool's regions).
    pub bar: u64,
    /// Created a deferred task since its last barrier.
    pub spawned: bool,
    /// The team's unfinished tasks when this thread last queued one.
    pub queued: u64,
}

impl Frame {
    fn implicit() -> Frame {
        Frame {
            team: 0,
            tid: 0,
            nthreads: 1,
            level: 0,
            active_level: 0,
            ancestors: Vec::new(),
            icv: defaults().icv,
            ws: 0,
            lp: LoopState::default(),
            workers: Vec::new(),
            pool: 0,
            in_final: false,
            task: 0,
            group: 0,
            bar: 0,
            spawned: false,
            queued: 0,
        }
    }
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Make the implicit frame (it allocates: done on the private stack, as every allocation of
/// Squall's code, see `crate::stack`).
#[cold]
fn implicit_frame() {
    crate::stack::on_private(|| {
        FRAMES.with(|v| {
            let mut v = v.borrow_mut();
            if v.is_empty() {
                v.push(Frame::implicit());
            }
        })
    })
}

/// Run `f` on the calling thread's current frame (`f` must not allocate: it may run on a
/// shared stack).
pub fn with<R>(f: impl FnOnce(&mut Frame) -> R) -> R {
    if FRAMES.with(|v| v.borrow().is_empty()) {
        implicit_frame();
    }
    FRAMES.with(|v| {
        let mut v = v.borrow_mut();
        let top = v.len() - 1;
        f(&mut v[top])
    })
}

/// A copy of the current frame.
pub fn current() -> Frame {
    with(|f| f.clone())
}

/// Enter a team.
pub fn push(frame: Frame) {
    FRAMES.with(|v| {
        let mut v = v.borrow_mut();
        if v.is_empty() {
            v.push(Frame::implicit());
        }
        v.push(frame)
    })
}

/// Leave the current team (never the implicit frame).
pub fn pop() -> Option<Frame> {
    FRAMES.with(|v| {
        let mut v = v.borrow_mut();
        if v.len() > 1 {
            v.pop()
        } else {
            None
        }
    })
}

// ----- the omp_* API ---------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn omp_set_num_threads(n: c_int) {
    if n > 0 {
        with(|f| f.icv.nthreads = n as u32);
    }
}

#[no_mangle]
pub extern "C" fn omp_get_num_threads() -> c_int {
    with(|f| f.nthreads as c_int)
}

#[no_mangle]
pub extern "C" fn omp_get_thread_num() -> c_int {
    with(|f| f.tid as c_int)
}

#[no_mangle]
pub extern "C" fn omp_get_max_threads() -> c_int {
    with(|f| f.icv.nthreads.min(i32::MAX as u32) as c_int)
}

/// The processors of the whole job (nodes times this node's processors).
#[no_mangle]
pub extern "C" fn omp_get_num_procs() -> c_int {
    crate::stack::on_private(job_procs).min(i32::MAX as u32) as c_int
}

#[no_mangle]
pub extern "C" fn omp_in_parallel() -> c_int {
    with(|f| c_int::from(f.active_level > 0))
}

#[no_mangle]
pub extern "C" fn omp_set_dynamic(v: c_int) {
    with(|f| f.icv.dynamic = v != 0);
}

#[no_mangle]
pub extern "C" fn omp_get_dynamic() -> c_int {
    with(|f| c_int::from(f.icv.dynamic))
}

#[no_mangle]
pub extern "C" fn omp_set_nested(v: c_int) {
    with(|f| f.icv.max_active = if v != 0 { u32::from(u8::MAX) } else { 1 });
}

#[no_mangle]
pub extern "C" fn omp_get_nested() -> c_int {
    with(|f| c_int::from(f.icv.max_active > 1))
}

#[no_mangle]
pub extern "C" fn omp_set_schedule(kind: c_int, chunk: c_int) {
    let k = (kind as u32) & !SCHED_MONOTONIC;
    if !(SCHED_STATIC..=SCHED_AUTO).contains(&k) {
        eprintln!("squall: omp_set_schedule: unknown kind {kind}, ignored");
        return;
    }
    with(|f| {
        f.icv.sched_kind = k;
        f.icv.sched_chunk = if chunk > 0 { chunk as u64 } else { 0 };
    });
}

/// # Safety
/// `kind` and `chunk` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn omp_get_schedule(kind: *mut c_int, chunk: *mut c_int) {
    let (k, c) = with(|f| (f.icv.sched_kind, f.icv.sched_chunk));
    let c = if c == 0 && k != SCHED_STATIC { 1 } else { c };
    // SAFETY: valid per the contract (checked for null).
    unsafe {
        if !kind.is_null() {
            kind.write(k as c_int);
        }
        if !chunk.is_null() {
            chunk.write(c.min(i32::MAX as u64) as c_int);
        }
    }
}

#[no_mangle]
pub extern "C" fn omp_get_thread_limit() -> c_int {
    defaults().thread_limit.min(i32::MAX as u32) as c_int
}

#[no_mangle]
pub extern "C" fn omp_set_max_active_levels(n: c_int) {
    if n >= 0 {
        with(|f| f.icv.max_active = n as u32);
    }
}

#[no_mangle]
pub extern "C" fn omp_get_max_active_levels() -> c_int {
    with(|f| f.icv.max_active.min(i32::MAX as u32) as c_int)
}

#[no_mangle]
pub extern "C" fn omp_get_supported_active_levels() -> c_int {
    c_int::from(u8::MAX)
}

#[no_mangle]
pub extern "C" fn omp_get_level() -> c_int {
    with(|f| f.level as c_int)
}

#[no_mangle]
pub extern "C" fn omp_get_active_level() -> c_int {
    with(|f| f.active_level as c_int)
}

#[no_mangle]
pub extern "C" fn omp_get_ancestor_thread_num(level: c_int) -> c_int {
    with(|f| match level {
        0 => 0,
        l if l > 0 && (l as u32) <= f.level => f.ancestors[l as usize - 1].0 as c_int,
        _ => -1,
    })
}

#[no_mangle]
pub extern "C" fn omp_get_team_size(level: c_int) -> c_int {
    with(|f| match level {
        0 => 1,
        l if l > 0 && (l as u32) <= f.level => f.ancestors[l as usize - 1].1 as c_int,
        _ => -1,
    })
}

#[no_mangle]
pub extern "C" fn omp_in_final() -> c_int {
    with(|f| c_int::from(f.in_final))
}

#[no_mangle]
pub extern "C" fn omp_get_proc_bind() -> c_int {
    with(|f| f.icv.bind as c_int)
}

/// Places are the job's nodes.
#[no_mangle]
pub extern "C" fn omp_get_num_places() -> c_int {
    squall::node_ref().map_or(1, |n| c_int::from(n.size()))
}

/// The place (node) the calling thread runs on.
#[no_mangle]
pub extern "C" fn omp_get_place_num() -> c_int {
    squall::node_ref().map_or(0, |n| c_int::from(n.rank().0))
}

/// Seconds read from the monotonic clock by `read` (`clock_gettime` or `clock_getres`).
fn monotonic(
    read: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int,
) -> c_double {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `read` fills a local struct.
    unsafe { read(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

#[no_mangle]
pub extern "C" fn omp_get_wtime() -> c_double {
    monotonic(libc::clock_gettime)
}

#[no_mangle]
pub extern "C" fn omp_get_wtick() -> c_double {
    monotonic(libc::clock_getres)
}

/// Cancellation is not activated (`OMP_CANCELLATION` is not honoured): as libgomp without it.
#[no_mangle]
pub extern "C" fn omp_get_cancellation() -> c_int {
    0
}

/// No offload devices: the host is the only device.
#[no_mangle]
pub extern "C" fn omp_get_num_devices() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn omp_get_default_device() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn omp_set_default_device(_d: c_int) {}

#[no_mangle]
pub extern "C" fn omp_is_initial_device() -> c_int {
    1
}

#[no_mangle]
pub extern "C" fn omp_get_initial_device() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn omp_get_device_num() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn omp_get_num_teams() -> c_int {
    1
}

#[no_mangle]
pub extern "C" fn omp_get_team_num() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn omp_get_max_task_priority() -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_syntax() {
        assert_eq!(parse_schedule("dynamic,4"), Some((SCHED_DYNAMIC, 4)));
        assert_eq!(parse_schedule(" Guided "), Some((SCHED_GUIDED, 0)));
        assert_eq!(
            parse_schedule("monotonic:static, 3"),
            Some((SCHED_STATIC, 3))
        );
        assert_eq!(parse_schedule("fast"), None);
        assert_eq!(parse_schedule("dynamic,0"), None);
        assert_eq!(parse_bind("spread,close"), Some(BIND_SPREAD));
        assert_eq!(parse_bind("primary"), Some(BIND_PRIMARY));
        assert_eq!(parse_bind("near"), None);
        assert_eq!(parse_size("16M"), Some(16 << 20));
        assert_eq!(parse_size("512"), Some(512 << 10));
        assert_eq!(parse_size("1x"), None);
    }
}
