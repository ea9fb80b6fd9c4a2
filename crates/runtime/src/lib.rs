//! The node runtime: one service thread per node composing the transport, the address
//! space, the coherence protocol and the synchronization managers; the public Rust API.
