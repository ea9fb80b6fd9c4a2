//! Two page protocols a Squall user wrote, using only the public interface
//! `squall_protocol::user` (re-exported by the runtime as `squall::protocol`): nothing here
//! reaches into Squall's own protocols, router or runtime.
//!
//! * [`Migratory`]: one copy of each page at a time, moving to whichever node touches it
//!   (good for records a lock protects and one node at a time works on). Sequentially
//!   consistent; nothing happens at synchronization.
//! * [`WriteUpdate`]: copies stay valid forever; a release sends the bytes a node wrote to the
//!   page's home, which forwards them to every copy and confirms only when all copies have
//!   them (an eager-release update protocol, Tempest §4: producers' writes reach the
//!   consumers at release, consumers never refetch).
//!
//! Register them with a node before it starts (`squall::protocol::register`) and allocate
//! under `Policy { protocol: ProtocolKind::User(id), .. }`.
//!
//! Owns: these two protocols. Must not touch: anything but the public user-protocol API.
#![forbid(unsafe_code)]

pub mod migratory;
pub mod update;

pub use migratory::Migratory;
pub use update::WriteUpdate;
