//! A seeded deterministic simulator: N protocol routers (the runtime's, each over an `hlrc`
//! and an `sc` core; programs with one protocol or mixing policies per allocation) over a virtual network with random
//! delays and cross-pair reordering (per-pair FIFO kept, as the real transports guarantee),
//! simulated application threads (several per node on some seeds; on half of the seeds their
//! stores may land late, while the node's core works: `memory`), a lock/barrier oracle,
//! checked against a sequential reference execution (data-race-free programs) or against the
//! set of sequentially consistent outcomes (racy litmus programs, `sc` only).
//!
//! Owns: `memory` (in-memory `PageMemory`), `program` (generation and the SC oracle),
//! `oracle` (synchronization), `lossy` (the reliable-datagram layer over a lossy network),
//! `world` (the event loop and checks), `scale` (costs per operation at large node counts).
//! Must not touch: real I/O.
#![forbid(unsafe_code)]

pub mod gptr;
pub mod lossy;
pub mod memory;
pub mod objects;
pub mod oracle;
pub mod program;
pub mod regions;
pub mod scale;
pub mod world;

pub use program::Shape;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use squall_protocol::ProtocolKind;
pub use world::{BarrierPaths, SimConfig, SimError, SimReport};

/// Default event budget of one run (livelock detection).
pub const MAX_EVENTS: u64 = 2_000_000;

/// The program a seed runs: `hlrc` always gets a data-race-free program, `sc` a data-race-free
/// or a racy litmus program.
pub fn program_for(protocol: ProtocolKind, shape: Shape, rng: &mut ChaCha8Rng) -> program::Program {
    match protocol {
        // A user protocol cannot be the default (`run_user_seed` mixes them in).
        ProtocolKind::Hlrc | ProtocolKind::User(_) => program::random_drf(rng, shape),
        ProtocolKind::Sc => {
            if rng.gen_bool(0.5) {
                program::random_drf(rng, shape)
            } else {
                program::random_litmus(rng)
            }
        }
    }
}

/// Run one seed. Half of the seeds synchronize through the oracle, half through
/// `squall-sync`'s real managers (of those, half with per-node barriers, half with
/// total-count barriers: eager infos, capped predictions that make late threads, or none).
pub fn run_seed(protocol: ProtocolKind, seed: u64, trace: bool) -> Result<SimReport, SimError> {
    run_shaped_seed(protocol, Shape::Short, seed, trace)
}

/// [`run_seed`] with programs of the given shape (`--long`, `--wide`, `--water`).
pub fn run_shaped_seed(
    protocol: ProtocolKind,
    shape: Shape,
    seed: u64,
    trace: bool,
) -> Result<SimReport, SimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5175_a11d_0000_0000);
    let prog = program_for(protocol, shape, &mut rng);
    run_program(protocol, false, shape, prog, rng, seed, trace)
}

/// Run one seed of a program mixing policies: a data-race-free program whose allocations
/// each name their own (`hlrc`, `hlrc` with updates, `hlrc` in units of 2, 4 or 8 pages, or
/// `sc`), the run's default one of the
/// protocols, all through the same router the runtime ships.
pub fn run_mixed_seed(shape: Shape, seed: u64, trace: bool) -> Result<SimReport, SimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x3ed1_a11d_0000_0000);
    let mut prog = program::random_drf(&mut rng, shape);
    // The policies from their own stream (the program's draws keep their meaning).
    let mut prng = ChaCha8Rng::seed_from_u64(seed ^ 0x9011_c700_0000_0000);
    let default = if prng.gen_bool(0.5) {
        ProtocolKind::Hlrc
    } else {
        ProtocolKind::Sc
    };
    prog.policies = prog
        .allocs
        .iter()
        .map(|(_, a)| {
            let (protocol, updates, unit_pages) = match prng.gen_range(0..6) {
                0 => (ProtocolKind::Hlrc, false, 1),
                1 => (ProtocolKind::Hlrc, true, 1),
                2 => (ProtocolKind::Sc, false, 1),
                // Coherence units of several pages (the last one of an allocation may be
                // shorter).
                3 => (ProtocolKind::Hlrc, false, 2),
                4 => (ProtocolKind::Hlrc, false, 4),
                _ => (ProtocolKind::Hlrc, false, 8),
            };
            Some(
                squall_protocol::Policy {
                    protocol,
                    unit_pages,
                    updates,
                    placement: a.placement,
                }
                .coherence(),
            )
        })
        .collect();
    run_program(default, true, shape, prog, rng, seed, trace)
}

/// The user protocols of the simulated nodes, in registration order:
/// `ProtocolKind::User(0)` is the example migratory protocol, `User(1)` the write-update one.
pub const USER_PROTOCOLS: [&str; 2] = ["migratory", "write-update"];

/// Run one seed of a data-race-free program whose allocations name their policies among the
/// built-in ones and the two example user protocols (`squall_example_protocols`), all in one
/// router per node. An allocation holding a var the program uses atomically keeps a
/// built-in protocol (user protocols refuse atomics).
pub fn run_user_seed(shape: Shape, seed: u64, trace: bool) -> Result<SimReport, SimError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x05e2_a11d_0000_0000);
    let mut prog = program::random_drf(&mut rng, shape);
    let mut prng = ChaCha8Rng::seed_from_u64(seed ^ 0x05e2_c700_0000_0000);
    let default = if prng.gen_bool(0.5) {
        ProtocolKind::Hlrc
    } else {
        ProtocolKind::Sc
    };
    let atomic_pages: std::collections::BTreeSet<u64> = prog
        .ops
        .iter()
        .flatten()
        .filter_map(|op| match op {
            program::Op::FetchAdd(v) => Some(prog.vars[*v].page.0),
            _ => None,
        })
        .collect();
    prog.policies = prog
        .allocs
        .iter()
        .map(|(_, a)| {
            let atomic = atomic_pages
                .iter()
                .any(|&p| p >= a.first.0 && p < a.first.0 + a.pages);
            let (protocol, updates) = match prng.gen_range(0..5) {
                0 if !atomic => (ProtocolKind::User(0), false),
                1 if !atomic => (ProtocolKind::User(1), false),
                0 | 1 => (ProtocolKind::Hlrc, false),
                2 => (ProtocolKind::Hlrc, true),
                3 => (ProtocolKind::Sc, false),
                _ => (ProtocolKind::User(prng.gen_range(0..2)), false),
            };
            let protocol = match protocol {
                ProtocolKind::User(_) if atomic => default,
                p => p,
            };
            Some(
                squall_protocol::Policy {
                    protocol,
                    unit_pages: 1,
                    updates: updates && protocol == ProtocolKind::Hlrc,
                    placement: a.placement,
                }
                .coherence(),
            )
        })
        .collect();
    run_program(default, true, shape, prog, rng, seed, trace)
}

/// The command that replays one user-protocol seed of the given shape.
pub fn replay_user_command(shape: Shape, seed: u64) -> String {
    replay_shaped_command_named("user", shape, seed)
}

fn run_program(
    protocol: ProtocolKind,
    mixed: bool,
    shape: Shape,
    prog: program::Program,
    mut rng: ChaCha8Rng,
    seed: u64,
    trace: bool,
) -> Result<SimReport, SimError> {
    if trace {
        println!("program: {prog:#?}");
    }
    // Barrier mode from its own stream (the draws above keep their meaning).
    let mut brng = ChaCha8Rng::seed_from_u64(seed ^ 0xba6_0000_0000_0ba6);
    let cfg = SimConfig {
        protocol,
        mixed,
        seed,
        trace,
        max_events: MAX_EVENTS,
        sync_cores: rng.gen_bool(0.5),
        lossy: if rng.gen_bool(0.25) {
            Some((rng.gen_range(0.0..0.2), rng.gen_range(0.0..0.1)))
        } else {
            None
        },
        barrier_total: brng.gen_bool(0.5),
        barrier_eager_cap: match brng.gen_range(0..6) {
            0 => Some(0),
            1 | 2 => Some(1),
            _ => None,
        },
        // Lock cache mode from its own stream too.
        lock_cache: ChaCha8Rng::seed_from_u64(seed ^ 0x10cc_ac4e_0000_0000).gen_bool(0.75),
        runtime_tuning: shape == Shape::Water,
        // Late stores on half of the seeds, from their own stream too.
        late_stores: ChaCha8Rng::seed_from_u64(seed ^ 0x1a7e_0000_5707_0000).gen_bool(0.5),
    };
    world::World::new(cfg, prog, rng)?.run()
}

/// The command that replays one mixed-policy seed of the given shape.
pub fn replay_mixed_command(shape: Shape, seed: u64) -> String {
    replay_shaped_command_named("mixed", shape, seed)
}

/// The command that replays one seed of the given shape.
pub fn replay_shaped_command(protocol: ProtocolKind, shape: Shape, seed: u64) -> String {
    replay_shaped_command_named(protocol.name(), shape, seed)
}

fn replay_shaped_command_named(protocol: &str, shape: Shape, seed: u64) -> String {
    format!(
        "cargo run -p squall-sim --release -- --protocol {}{} --seed {seed} --trace",
        protocol,
        match shape {
            Shape::Short => "",
            Shape::Long => " --long",
            Shape::Wide => " --wide",
            Shape::Water => " --water",
        }
    )
}
