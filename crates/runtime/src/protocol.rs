//! User-written page protocols in a Squall program (Tempest, seed 001 §2–3): implement
//! [`UserProtocol`] against the [`Mechanisms`] it is handed, [`register`] it before the node
//! starts (`squall::init`), and allocate under it with
//! `node.alloc_policy(size, Policy::new(kind, false, placement))`, where `kind` is what
//! [`register`] returned. Allocations under the default policy and under `hlrc`/`sc` live
//! beside it in the same program, synchronized by the same locks and barriers.
//!
//! ```no_run
//! use squall::protocol::{self, Mechanisms, NodeId, PageId, ProtoError, UserProtocol};
//! # struct Mine;
//! # impl UserProtocol for Mine {
//! #     fn name(&self) -> &'static str { "mine" }
//! #     fn fault(&mut self, m: &mut Mechanisms<'_>, p: PageId, _w: bool) -> Result<(), ProtoError> { Ok(()) }
//! #     fn message(&mut self, m: &mut Mechanisms<'_>, f: NodeId, b: &[u8]) -> Result<(), ProtoError> { Ok(()) }
//! # }
//! let kind = protocol::register("mine", |_me, _layout| Box::new(Mine)).unwrap();
//! let node = squall::init().unwrap();
//! let p = node
//!     .alloc_policy(1 << 20, squall::Policy::new(kind, false, squall::Placement::Blocked))
//!     .unwrap();
//! ```
//!
//! The interface (what a protocol gets, what the mechanisms guarantee) is documented in
//! [`squall_protocol::user`], re-exported here; two complete protocols written against it
//! are in `examples/protocols` of the repository (`squall-example-protocols`).
//!
//! Owns: the process's registry of user protocols. Must not touch: the protocols' state.

use crate::error::{Result, SquallError};
use parking_lot::Mutex;
pub use squall_protocol::user::*;
pub use squall_protocol::{Policy, UserFactory};
use std::sync::Arc;

struct Registry {
    protocols: Vec<(&'static str, UserFactory)>,
    /// A node started: the cores are built, the numbering is fixed.
    started: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    protocols: Vec::new(),
    started: false,
});

/// Register a user protocol for the node this process will start: `factory(me, layout)`
/// builds the node's instance. Returns the [`ProtocolKind`] allocations name to follow it
/// (`ProtocolKind::User(n)`, `n` the registration order: every node of the job must register
/// the same protocols in the same order, as a program that registers them at the start of
/// `main` does). Registering a name again returns its kind. Refused once a node started in
/// this process, and beyond [`MAX_USER_PROTOCOLS`].
pub fn register(
    name: &'static str,
    factory: impl Fn(NodeId, HeapLayout) -> Box<dyn UserProtocol> + Send + Sync + 'static,
) -> Result<ProtocolKind> {
    let mut r = REGISTRY.lock();
    if let Some(i) = r.protocols.iter().position(|(n, _)| *n == name) {
        return Ok(ProtocolKind::User(i as u8));
    }
    if r.started {
        return Err(SquallError::Config(format!(
            "user protocol {name:?} registered after the node started: register protocols before squall::init"
        )));
    }
    if r.protocols.len() >= usize::from(MAX_USER_PROTOCOLS) {
        return Err(SquallError::Config(format!(
            "user protocol {name:?}: at most {MAX_USER_PROTOCOLS} user protocols"
        )));
    }
    r.protocols.push((name, Arc::new(factory)));
    Ok(ProtocolKind::User((r.protocols.len() - 1) as u8))
}

/// The registered protocols, in order; no registration is accepted after this (the node
/// starting).
pub(crate) fn take_registered() -> Vec<(&'static str, UserFactory)> {
    let mut r = REGISTRY.lock();
    r.started = true;
    r.protocols.clone()
}
