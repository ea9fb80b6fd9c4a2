//! Synchronization managers (sans-IO): queue locks, barriers, condition variables, flags and
//! remote atomics, carrying the coherence protocol's consistency information.
#![forbid(unsafe_code)]
