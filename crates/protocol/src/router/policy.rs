//! Per-allocation coherence policies and the page → policy map of one node.
//!
//! Owns: [`Policy`] (protocol, coherence unit, update or invalidation, home placement), its
//! validation, and [`PolicyMap`], the ranges of allocations whose policy differs from the
//! job's default. Must not touch: protocol state, messages.

use crate::{ProtoError, ProtocolKind};
use squall_core::{PageId, Placement};
use std::collections::BTreeMap;

/// The largest coherence unit, in pages (a unit travels as one `page_run` of `hlrc`).
pub const MAX_UNIT_PAGES: u32 = 64;

/// How one allocation is kept coherent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The protocol core that owns the allocation's pages.
    pub protocol: ProtocolKind,
    /// The coherence unit in pages: a power of two up to [`MAX_UNIT_PAGES`]. Units of more
    /// than one page are kept by `hlrc` only, without updates: a fault on any page of a unit
    /// fetches the whole unit in one request and one reply, notices name the unit and
    /// invalidate it whole, its pages share one home and never migrate.
    pub unit_pages: u32,
    /// `hlrc` only: homes push the pages they wrote to the copy holders at barriers
    /// (an update protocol, Tempest §4) instead of leaving the copies to be invalidated
    /// and fetched again.
    pub updates: bool,
    /// Where the homes of the allocation's pages are.
    pub placement: Placement,
}

/// The part of a [`Policy`] every node must know about a page (the placement is known to
/// the allocating node, which every protocol asks for homes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Coherence {
    pub protocol: ProtocolKind,
    pub unit_pages: u32,
    pub updates: bool,
}

impl Policy {
    /// The default policy of a job: `protocol`, one-page units, `updates` (for `hlrc`).
    pub fn new(protocol: ProtocolKind, updates: bool, placement: Placement) -> Self {
        Policy {
            protocol,
            unit_pages: 1,
            updates: updates && protocol == ProtocolKind::Hlrc,
            placement,
        }
    }

    /// What every node must know about the allocation's pages.
    pub fn coherence(&self) -> Coherence {
        Coherence {
            protocol: self.protocol,
            unit_pages: self.unit_pages,
            updates: self.updates,
        }
    }

    /// Check the policy can be honoured.
    pub fn check(&self) -> Result<(), ProtoError> {
        self.coherence().check()
    }
}

impl Coherence {
    /// Check the policy can be honoured.
    pub fn check(&self) -> Result<(), ProtoError> {
        if !self.unit_pages.is_power_of_two() {
            return Err(ProtoError::BadPolicy {
                why: format!(
                    "a coherence unit of {} pages: it must be a power of two (at least 1)",
                    self.unit_pages
                ),
            });
        }
        if self.unit_pages > MAX_UNIT_PAGES {
            return Err(ProtoError::BadPolicy {
                why: format!(
                    "a coherence unit of {} pages: at most {MAX_UNIT_PAGES}",
                    self.unit_pages
                ),
            });
        }
        if self.unit_pages > 1 && self.protocol != ProtocolKind::Hlrc {
            return Err(ProtoError::BadPolicy {
                why: format!(
                    "a coherence unit of {} pages under {}: units of several pages are kept by hlrc only",
                    self.unit_pages,
                    self.protocol.name()
                ),
            });
        }
        if self.unit_pages > 1 && self.updates {
            return Err(ProtoError::BadPolicy {
                why: format!(
                    "a coherence unit of {} pages with updates: the update policy keeps one-page units",
                    self.unit_pages
                ),
            });
        }
        if self.updates && self.protocol != ProtocolKind::Hlrc {
            return Err(ProtoError::BadPolicy {
                why: format!(
                    "updates under {}: the update policy is a variant of hlrc",
                    self.protocol.name()
                ),
            });
        }
        Ok(())
    }
}

/// The allocations of a node's view whose coherence differs from the job default: ranges of
/// pages (never overlapping: the heap never hands out a page range twice, and a size-class
/// page only ever holds objects of one policy).
#[derive(Debug, Default)]
pub struct PolicyMap {
    /// First page → (one past the last page, coherence).
    ranges: BTreeMap<u64, (u64, Coherence)>,
}

impl PolicyMap {
    /// Record `pages` pages from `first` under `c`.
    pub fn insert(&mut self, first: PageId, pages: u64, c: Coherence) {
        self.ranges
            .insert(first.0, (first.0.saturating_add(pages), c));
    }

    /// The coherence of `page` if it lies in a recorded range.
    pub fn get(&self, page: PageId) -> Option<Coherence> {
        self.ranges
            .range(..=page.0)
            .next_back()
            .filter(|(_, (end, _))| page.0 < *end)
            .map(|(_, (_, c))| *c)
    }

    /// Ranges recorded.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// No range recorded.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_finds_ranges_and_nothing_between() {
        let sc = Coherence {
            protocol: ProtocolKind::Sc,
            unit_pages: 1,
            updates: false,
        };
        let upd = Coherence {
            protocol: ProtocolKind::Hlrc,
            unit_pages: 1,
            updates: true,
        };
        let mut m = PolicyMap::default();
        m.insert(PageId(10), 5, sc);
        m.insert(PageId(20), 1, upd);
        assert_eq!(m.get(PageId(9)), None);
        assert_eq!(m.get(PageId(10)), Some(sc));
        assert_eq!(m.get(PageId(14)), Some(sc));
        assert_eq!(m.get(PageId(15)), None);
        assert_eq!(m.get(PageId(20)), Some(upd));
        assert_eq!(m.get(PageId(21)), None);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn policies_are_checked() {
        let p = Policy::new(ProtocolKind::Hlrc, true, Placement::FirstTouch);
        assert!(p.check().is_ok());
        let sc_updates = Policy {
            updates: true,
            ..Policy::new(ProtocolKind::Sc, false, Placement::FirstTouch)
        };
        assert!(matches!(
            sc_updates.check(),
            Err(ProtoError::BadPolicy { .. })
        ));
        for unit in [0, 3, 128] {
            let q = Policy {
                unit_pages: unit,
                ..p
            };
            assert!(q.check().is_err(), "unit {unit}");
        }
        let inval = Policy::new(ProtocolKind::Hlrc, false, Placement::FirstTouch);
        for unit in [1, 2, 4, 16, 64] {
            let q = Policy {
                unit_pages: unit,
                ..inval
            };
            assert!(q.check().is_ok(), "unit {unit}");
        }
        // Units of several pages: hlrc without updates only.
        let unit4 = Policy { unit_pages: 4, ..p };
        assert!(unit4.check().is_err());
        let sc4 = Policy {
            unit_pages: 4,
            ..Policy::new(ProtocolKind::Sc, false, Placement::FirstTouch)
        };
        assert!(sc4.check().is_err());
        // The job default drops `updates` for sc.
        assert!(!Policy::new(ProtocolKind::Sc, true, Placement::FirstTouch).updates);
    }
}
