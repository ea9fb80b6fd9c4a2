//! Id newtypes of the synchronization layer: waiters, barriers, condition variables, flags.
//!
//! Owns: plain identifiers and their lowercase display. Must not touch: any state.
use serde::{Deserialize, Serialize};
use std::fmt;

/// Opaque token naming one blocked application thread of this node. The runtime chooses it;
/// the sync core hands it back in exactly one `Action::Wake` per operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Waiter(pub u64);

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "waiter {}", self.0)
    }
}

/// A global barrier.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BarrierId(pub u64);

impl fmt::Display for BarrierId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "barrier {}", self.0)
    }
}

/// A global condition variable.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CondId(pub u64);

impl fmt::Display for CondId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "condition {}", self.0)
    }
}

/// A global flag (set / wait / clear).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlagId(pub u64);

impl fmt::Display for FlagId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flag {}", self.0)
    }
}
