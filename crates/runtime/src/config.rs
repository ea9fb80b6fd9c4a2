//! Runtime settings read from the environment (`SQUALL_PROTOCOL`, `SQUALL_PLACEMENT`,
//! `SQUALL_STATS`, `SQUALL_STATS_FILE`; the table is `squall_core::env::ALL`). Owns parsing and
//! the error messages for bad values; must not touch the network or memory.
use crate::error::{Result, SquallError};
use squall_core::{env, NodeId, Placement};
pub use squall_protocol::ProtocolKind;

/// Parse `hlrc` or `sc` (empty: `hlrc`).
pub fn parse_protocol(s: &str) -> Result<ProtocolKind> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" => Ok(ProtocolKind::Hlrc),
        other => other.parse().map_err(|_| {
            SquallError::Config(format!(
                "unknown protocol '{other}' in {}: use hlrc or sc",
                env::PROTOCOL
            ))
        }),
    }
}

/// Where an allocation's pages get their homes. `Local` is resolved to the allocating node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PlacementSpec {
    /// A placement that does not depend on who allocates.
    Fixed(Placement),
    /// Home = the allocating node (Tempest's local allocation).
    Local,
}

impl PlacementSpec {
    /// Parse `first-touch`, `round-robin[:PAGES]`, `blocked`, `node:N`, `local`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let bad = || {
            SquallError::Config(format!(
                "unknown placement '{s}': use first-touch, round-robin[:PAGES], blocked, node:N or local"
            ))
        };
        Ok(match s.as_str() {
            "first-touch" | "firsttouch" | "" => PlacementSpec::Fixed(Placement::FirstTouch),
            "blocked" => PlacementSpec::Fixed(Placement::Blocked),
            "local" => PlacementSpec::Local,
            "round-robin" => PlacementSpec::Fixed(Placement::RoundRobin { block_pages: 1 }),
            other => {
                if let Some(n) = other.strip_prefix("round-robin:") {
                    let block_pages = n.parse::<u64>().map_err(|_| bad())?.max(1);
                    PlacementSpec::Fixed(Placement::RoundRobin { block_pages })
                } else if let Some(n) = other.strip_prefix("node:") {
                    PlacementSpec::Fixed(Placement::Node(NodeId(n.parse().map_err(|_| bad())?)))
                } else {
                    return Err(bad());
                }
            }
        })
    }
    /// The placement for an allocation made by `me`.
    pub fn resolve(self, me: NodeId) -> Placement {
        match self {
            PlacementSpec::Fixed(p) => p,
            PlacementSpec::Local => Placement::Node(me),
        }
    }
}

/// Settings of one node's runtime.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    pub protocol: ProtocolKind,
    pub placement: PlacementSpec,
    pub stats: bool,
    pub stats_file: String,
}

impl RuntimeConfig {
    /// Read the settings from the environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read the settings through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let protocol = parse_protocol(&get(env::PROTOCOL).unwrap_or_default())?;
        let placement = PlacementSpec::parse(&get(env::PLACEMENT).unwrap_or_default())
            .map_err(|e| SquallError::Config(format!("{e} (in {})", env::PLACEMENT)))?;
        let stats = matches!(
            get(env::STATS).unwrap_or_default().trim(),
            "1" | "true" | "yes" | "on"
        );
        let stats_file = get(env::STATS_FILE).unwrap_or_else(|| "squall-stats.json".into());
        Ok(RuntimeConfig {
            protocol,
            placement,
            stats,
            stats_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_placements_and_protocols() {
        assert_eq!(
            PlacementSpec::parse("blocked").ok(),
            Some(PlacementSpec::Fixed(Placement::Blocked))
        );
        assert_eq!(
            PlacementSpec::parse("round-robin:4").ok(),
            Some(PlacementSpec::Fixed(Placement::RoundRobin {
                block_pages: 4
            }))
        );
        assert_eq!(
            PlacementSpec::parse("node:3").ok(),
            Some(PlacementSpec::Fixed(Placement::Node(NodeId(3))))
        );
        assert_eq!(
            PlacementSpec::parse("local")
                .ok()
                .map(|p| p.resolve(NodeId(2))),
            Some(Placement::Node(NodeId(2)))
        );
        assert!(PlacementSpec::parse("everywhere").is_err());
        assert_eq!(parse_protocol("SC").ok(), Some(ProtocolKind::Sc));
        assert_eq!(parse_protocol("").ok(), Some(ProtocolKind::Hlrc));
        assert!(parse_protocol("mesi").is_err());
    }
}
