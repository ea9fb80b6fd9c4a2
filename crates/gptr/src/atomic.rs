//! Atomic operations executed at the target: their kinds, operand widths and semantics on a
//! word's bits (the reference the simulator and the memory implementations follow). Owns the
//! semantics only; must not touch memory.
use crate::GptrError;

/// The operation of a remote atomic. Values travel as the word's bits zero-extended to `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AtomicKind {
    /// Read the word.
    Fetch = 0,
    /// Write `a`; returns the old value.
    Set = 1,
    /// Add `a` (wrapping); returns the old value (`add` and `fetch_add` both).
    Add = 2,
    /// Write `a`; returns the old value.
    Swap = 3,
    /// If the word equals `b`, write `a`; returns the old value.
    CompareSwap = 4,
    /// Bitwise and with `a`; returns the old value.
    And = 5,
    /// Bitwise or with `a`; returns the old value.
    Or = 6,
    /// Bitwise xor with `a`; returns the old value.
    Xor = 7,
}

impl AtomicKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        use AtomicKind::*;
        Some(match v {
            0 => Fetch,
            1 => Set,
            2 => Add,
            3 => Swap,
            4 => CompareSwap,
            5 => And,
            6 => Or,
            7 => Xor,
            _ => return None,
        })
    }

    /// The new value of a word holding `old` (masked to `width`).
    pub fn apply(self, width: Width, old: u64, a: u64, b: u64) -> u64 {
        let m = width.mask();
        let (old, a, b) = (old & m, a & m, b & m);
        let new = match self {
            AtomicKind::Fetch => old,
            AtomicKind::Set | AtomicKind::Swap => a,
            AtomicKind::Add => old.wrapping_add(a),
            AtomicKind::CompareSwap => {
                if old == b {
                    a
                } else {
                    old
                }
            }
            AtomicKind::And => old & a,
            AtomicKind::Or => old | a,
            AtomicKind::Xor => old ^ a,
        };
        new & m
    }
}

/// Width of an atomic's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Width {
    W4,
    W8,
}

impl Width {
    pub fn bytes(self) -> u64 {
        match self {
            Width::W4 => 4,
            Width::W8 => 8,
        }
    }
    pub fn mask(self) -> u64 {
        match self {
            Width::W4 => 0xffff_ffff,
            Width::W8 => u64::MAX,
        }
    }
    pub fn from_bytes(n: u64) -> Result<Self, GptrError> {
        match n {
            4 => Ok(Width::W4),
            8 => Ok(Width::W8),
            _ => Err(GptrError::Invalid(format!(
                "remote atomics work on 4- or 8-byte words, not {n} bytes"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantics() {
        assert_eq!(AtomicKind::Add.apply(Width::W4, 0xffff_ffff, 1, 0), 0);
        assert_eq!(AtomicKind::Add.apply(Width::W8, 5, u64::MAX, 0), 4);
        assert_eq!(AtomicKind::CompareSwap.apply(Width::W8, 3, 9, 3), 9);
        assert_eq!(AtomicKind::CompareSwap.apply(Width::W8, 4, 9, 3), 4);
        assert_eq!(AtomicKind::Fetch.apply(Width::W8, 4, 9, 3), 4);
        assert_eq!(AtomicKind::Xor.apply(Width::W8, 6, 3, 0), 5);
        for v in 0..8 {
            assert_eq!(AtomicKind::from_u8(v).map(|k| k as u8), Some(v));
        }
        assert!(AtomicKind::from_u8(8).is_none());
        assert!(Width::from_bytes(2).is_err());
    }
}
