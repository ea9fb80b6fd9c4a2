//! Coherence protocols as replaceable policies: sans-IO cores that take faults, messages and
//! synchronization events and emit sends, protections, installs and resumes.
#![forbid(unsafe_code)]
