//! The communication backbone: handlers by message type run on the node's service thread,
//! one-way sends, request/reply, bulk transfer; backends in `backend/`.
//!
//! Start a node with [`bootstrap::from_env`] (what `squall run` sets up) or
//! [`bootstrap::start`] / [`bootstrap::start_with`] with a [`NetConfig`]. Delivery guarantee on
//! every backend: exactly once, FIFO per sender→receiver pair, any size. Message types below 64
//! are the transport's; see [`endpoint`].
// No unsafe code, except the MPI backend's posted receive (`backend/mpi_rx.rs`, feature `mpi`):
// a receive that stays posted across calls is beyond rsmpi's safe, scope-bound requests; and
// `sched.rs`'s one `sched_setattr` call (no wrapper crate offers it); and `landing.rs`, a
// caller's buffer lent to the tcp reader for one call (a get's reply read straight into it).
#![deny(unsafe_code)]

mod auth;
mod backend;
pub mod bootstrap;
pub mod config;
pub mod endpoint;
pub mod error;
pub mod faults;
mod landing;
mod sched;
pub mod stats;
pub use backend::udp::core as udp_core;

pub use bytes::Bytes;
pub use config::{AuthMode, NetConfig, Transport};
pub use endpoint::{Endpoint, Incoming};
pub use error::NetError;
pub use faults::FaultSpec;
pub use squall_core::{JobId, NodeId};
pub use squall_wire::{AuthKey, MsgType};
pub use stats::{DropReason, NetStats, TypeCount};
