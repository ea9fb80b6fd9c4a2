//! DSM/IP shared objects (seed 004 §3): the runtime side of `squall-objects`. One object core
//! per node behind its own lock (never the service lock), driven by API calls from application
//! threads and by `msg::OBJECT` messages on the service thread; callers that need other nodes
//! park on a completion that a later message fills.
//!
//! A write is two core calls with the lock released in between (`write_begin`, then
//! `write_step` until done): the seed's Figure 7 steps, so a handler that takes write
//! permission away can run between them, and completes the flagged write itself.
//!
//! Ordering: OU and MSI calls return only when the access has taken effect (sequential
//! consistency), so Squall's barriers and locks (`DSM_Barrier`, `DSM_Lock`) order them with no
//! extra flush. NC writes are one-way notices: nothing orders them with barriers or locks (see
//! docs/memory-model.md). Owns: the object core and its parked callers. Must not touch: the
//! page protocol, the service state.

use crate::error::{Result, SquallError};
use crate::msg;
use crate::node::{node, Node};
use parking_lot::{Condvar, Mutex};
use squall_net::{Endpoint, Incoming};
use squall_objects::{Action, Completion, ObjError, ObjectsCore, Step};
pub use squall_objects::{ElemKind, Engine, ObjectId, ObjectSpec, ObjectStats};
use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

static SERVICE: OnceLock<Arc<ObjService>> = OnceLock::new();
static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static WAITER: Cell<u64> = const { Cell::new(0) };
}

/// This thread's waiter id for the object core.
fn my_waiter() -> u64 {
    WAITER.with(|w| {
        if w.get() == 0 {
            w.set(NEXT_WAITER.fetch_add(1, Ordering::Relaxed));
        }
        w.get()
    })
}

struct ObjService {
    core: Mutex<ObjectsCore>,
    done: Mutex<HashMap<u64, Completion>>,
    cv: Condvar,
}

fn service_for(ep: &Endpoint) -> &'static Arc<ObjService> {
    SERVICE.get_or_init(|| {
        Arc::new(ObjService {
            core: Mutex::new(ObjectsCore::new(ep.rank(), ep.size())),
            done: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
        })
    })
}

/// The message handler (registered in `node::handlers`). A bad message or an incoherence the
/// MSI engine detects ends the job: the engines' invariants no longer hold.
pub(crate) fn on_message(ep: &Endpoint, m: Incoming) {
    let s = service_for(ep);
    let mut core = s.core.lock();
    if let Err(e) = core.on_message(m.src, &m.payload) {
        crate::service::fatal(ep.rank(), &format!("shared objects: {e}"));
    }
    s.flush(ep, &mut core);
}

impl ObjService {
    /// Carry out the core's actions in order (sends while the core lock is held, so a node's
    /// messages leave in the order the core made them).
    fn flush(&self, ep: &Endpoint, core: &mut ObjectsCore) {
        let mut woke = false;
        while let Some(a) = core.poll_action() {
            match a {
                // NC notices (`reliable == false`) go out the same way: the backbone has no
                // unacknowledged mode, so on Squall they arrive; NC promises nothing more.
                Action::Send { to, msg: bytes, .. } => {
                    if let Err(e) = ep.send(to, msg::OBJECT, bytes) {
                        crate::service::fatal(
                            ep.rank(),
                            &format!("shared objects: send to {to}: {e}"),
                        );
                    }
                }
                Action::Complete { waiter, how } => {
                    self.done.lock().insert(waiter, how);
                    woke = true;
                }
            }
        }
        if woke {
            self.cv.notify_all();
        }
    }

    fn wait(&self, waiter: u64) -> Completion {
        let mut g = self.done.lock();
        loop {
            if let Some(c) = g.remove(&waiter) {
                return c;
            }
            self.cv.wait(&mut g);
        }
    }

    /// Run `f` on the core, then its actions.
    fn with<R>(&self, ep: &Endpoint, f: impl FnOnce(&mut ObjectsCore) -> R) -> R {
        let mut core = self.core.lock();
        let r = f(&mut core);
        self.flush(ep, &mut core);
        r
    }
}

fn ctx() -> Result<(Node, &'static Arc<ObjService>)> {
    let n = node()?;
    let s = service_for(n.endpoint());
    if n.endpoint().is_service_thread() {
        return Err(SquallError::OnServiceThread("a shared-object call"));
    }
    Ok((n, s))
}

/// Create an object collectively: every node calls this with the same specification, in the
/// same order, and gets the same id (no message is sent).
pub fn create(spec: ObjectSpec) -> Result<ObjectId> {
    let (n, s) = ctx()?;
    Ok(s.with(n.endpoint(), |c| c.create(spec))?)
}

/// Create an object on this node alone under `name`; the other nodes find it with [`lookup`].
pub fn create_named(name: &str, spec: ObjectSpec) -> Result<ObjectId> {
    let (n, s) = ctx()?;
    Ok(s.with(n.endpoint(), |c| c.create_named(name, spec))?)
}

/// The object another node created under `name`: waits until its announcement arrives.
pub fn lookup(name: &str) -> Result<ObjectId> {
    let (n, s) = ctx()?;
    let w = my_waiter();
    match s.with(n.endpoint(), |c| c.lookup(name, w)) {
        Step::Ready(id) => Ok(id),
        Step::Pending => match s.wait(w) {
            Completion::Found(id) => Ok(id),
            other => Err(SquallError::Remote(format!(
                "look-up of {name:?} ended with {other:?}"
            ))),
        },
    }
}

/// The specification of object `id`.
pub fn spec(id: ObjectId) -> Result<ObjectSpec> {
    let (_, s) = ctx()?;
    let spec = s.core.lock().spec(id);
    spec.ok_or(SquallError::Object(ObjError::NoObject(id)))
}

/// `Read()`: element `idx` of `id` into `out` (its element size).
pub fn read_into(id: ObjectId, idx: u64, out: &mut [u8]) -> Result<()> {
    let (n, s) = ctx()?;
    let w = my_waiter();
    let v = match s.with(n.endpoint(), |c| c.read(id, idx, w))? {
        Step::Ready(v) => v,
        Step::Pending => match s.wait(w) {
            Completion::Value(v) => v,
            other => return Err(SquallError::Remote(format!("read ended with {other:?}"))),
        },
    };
    if v.len() != out.len() {
        return Err(SquallError::Object(ObjError::BadValue {
            obj: id,
            got: out.len(),
            want: v.len(),
        }));
    }
    out.copy_from_slice(&v);
    Ok(())
}

/// `Write()`: element `idx` of `id` from `value` (its element size). Returns when the write
/// has taken effect (OU, MSI) or has been sent (NC).
pub fn write_from(id: ObjectId, idx: u64, value: &[u8]) -> Result<()> {
    let (n, s) = ctx()?;
    let ep = n.endpoint();
    let w = my_waiter();
    // Figure 7 lines 1–2, then 3–7 as separate steps: handlers may run in between.
    s.with(ep, |c| c.write_begin(id, idx, value, w))?;
    loop {
        match s.with(ep, |c| c.write_step(w))? {
            Step::Ready(()) => return Ok(()),
            Step::Pending => match s.wait(w) {
                Completion::Written => return Ok(()),
                Completion::Retry => continue,
                other => return Err(SquallError::Remote(format!("write ended with {other:?}"))),
            },
        }
    }
}

/// This node's shared-object event counters.
pub fn stats() -> Result<ObjectStats> {
    let (_, s) = ctx()?;
    let st = s.core.lock().stats();
    Ok(st)
}

/// An element type of a typed shared object.
pub trait Element: Copy {
    const KIND: ElemKind;
    fn to_le(self) -> [u8; 8];
    fn from_le(b: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $k:expr, $n:expr) => {
        impl Element for $t {
            const KIND: ElemKind = $k;
            fn to_le(self) -> [u8; 8] {
                let mut a = [0u8; 8];
                a[..$n].copy_from_slice(&self.to_le_bytes());
                a
            }
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(&b[..$n]);
                <$t>::from_le_bytes(a)
            }
        }
    };
}
element!(i32, ElemKind::Int, 4);
element!(i64, ElemKind::Long, 8);
element!(f32, ElemKind::Float, 4);
element!(f64, ElemKind::Double, 8);

/// A typed shared object (the seed's `SharedInt`, `SharedIntArray`, `SharedFloatArray`, ...):
/// `read(i)`/`write(i, v)` atomic per element, the engine chosen at creation.
#[derive(Debug, Clone, Copy)]
pub struct SharedObject<T: Element> {
    id: ObjectId,
    len: u64,
    _t: PhantomData<T>,
}

impl<T: Element> SharedObject<T> {
    fn spec(len: u64, seg_elems: u32, engine: Engine) -> ObjectSpec {
        ObjectSpec {
            kind: T::KIND,
            len,
            seg_elems,
            engine,
        }
    }

    /// Create collectively (every node, same arguments, same order). `seg_elems`: elements per
    /// coherence segment (0: about 256 bytes).
    pub fn create(len: u64, seg_elems: u32, engine: Engine) -> Result<Self> {
        let id = create(Self::spec(len, seg_elems, engine))?;
        Ok(SharedObject {
            id,
            len,
            _t: PhantomData,
        })
    }

    /// Create on this node alone under `name`.
    pub fn create_named(name: &str, len: u64, seg_elems: u32, engine: Engine) -> Result<Self> {
        let id = create_named(name, Self::spec(len, seg_elems, engine))?;
        Ok(SharedObject {
            id,
            len,
            _t: PhantomData,
        })
    }

    /// The object another node created under `name` (its element type must be `T`).
    pub fn lookup(name: &str) -> Result<Self> {
        let id = lookup(name)?;
        let sp = spec(id)?;
        if sp.kind != T::KIND {
            return Err(SquallError::Object(ObjError::BadSpec(format!(
                "{name:?} holds {:?} elements, not {:?}",
                sp.kind,
                T::KIND
            ))));
        }
        Ok(SharedObject {
            id,
            len: sp.len,
            _t: PhantomData,
        })
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `Read()` of element `i`.
    pub fn read(&self, i: u64) -> Result<T> {
        let mut b = [0u8; 8];
        let n = T::KIND.size();
        read_into(self.id, i, &mut b[..n])?;
        Ok(T::from_le(&b[..n]))
    }

    /// `Write()` of element `i`.
    pub fn write(&self, i: u64, v: T) -> Result<()> {
        let n = T::KIND.size();
        write_from(self.id, i, &v.to_le()[..n])
    }
}
