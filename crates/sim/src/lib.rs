//! A seeded deterministic simulator: N protocol cores over a virtual network with loss,
//! duplication, reordering and delay, checked against a sequential reference.
#![forbid(unsafe_code)]
