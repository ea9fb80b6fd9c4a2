//! Helpers every protocol may use, so that no protocol imports another: the byte codec of
//! message fields, home-executed atomics (their encoding, execution and release-info store),
//! twin/diff encoding, the page home directory, and page-access changes in runs.
//!
//! Owns: mechanisms with no protocol state of their own. Must not touch: any protocol's
//! per-page state or message kinds (each protocol's messages are its own), sockets, clocks,
//! threads. A protocol module imports from here and from the crate root (`Action`,
//! `Protocol`, ...), never from a sibling protocol.

pub(crate) mod access;
pub mod atomic;
pub(crate) mod codec;
pub mod diff;
pub mod home;
