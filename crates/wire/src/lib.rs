//! The wire format: a fixed header (job id, type, ranks, sequence, length, fragment info, flags)
//! then the payload. Owns encoding and decoding only; must not touch sockets or clocks.
#![forbid(unsafe_code)]
