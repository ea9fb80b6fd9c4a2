//! `squall-sim`: run or replay simulator seeds.
//!
//! Examples: `squall-sim --protocol hlrc --seed 1234 --trace` (replay one seed with a trace),
//! `squall-sim --protocol both --seeds 1000000` (a million seeds per protocol),
//! `squall-sim --protocol hlrc --long --seeds 100000` (longer programs; `--wide`: over runs of
//! consecutive pages; `--water`: Water's sharing pattern), `squall-sim --scale 64,256,1024` (messages per read fault, lock acquire
//! and barrier, and the barrier's depth, at those node counts: a Markdown table, then JSON).

use clap::Parser;
use squall_protocol::{ProtoStats, ProtocolKind};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(about = "Squall's deterministic protocol simulator")]
struct Args {
    /// hlrc, sc, both, mixed (programs whose allocations each name a policy: hlrc, hlrc
    /// with updates, hlrc in units of 2-8 pages or sc, through one router per node), user
    /// (mixed with the two example user protocols, migratory and write-update, as well) or all
    /// (the four)
    #[arg(long, default_value = "both")]
    protocol: String,
    /// Run this one seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run this many seeds, starting at --start.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Print every event of the run.
    #[arg(long)]
    trace: bool,
    /// Long programs (more phases, operations, vars and locks per seed).
    #[arg(long)]
    long: bool,
    /// Long programs over wide allocations (runs of consecutive pages).
    #[arg(long, conflicts_with = "long")]
    wide: bool,
    /// Water's pattern (molecules packed ~14 per page, a lock per molecule, every thread
    /// adding to every molecule's force in turn), hlrc cores with the runtime's knobs.
    #[arg(long, conflicts_with_all = ["long", "wide"])]
    water: bool,
    /// Print the summed protocol statistics as JSON.
    #[arg(long)]
    stats: bool,
    /// Simulate another sharing model instead of the page protocols: `regions` (CRL),
    /// `objects` (the DSM/IP shared-object engines: OU, MSI, NC by seed), `gptr` (the
    /// one-sided engine of Split-C global pointers and OpenSHMEM).
    #[arg(long)]
    model: Option<String>,
    /// With `--model objects`: force one engine (`ou`, `msi` or `nc`).
    #[arg(long)]
    engine: Option<String>,
    /// Print the costs per operation at these node counts (see `squall_sim::scale`), seeded
    /// by `--seed` (default 1).
    #[arg(long, value_delimiter = ',')]
    scale: Option<Vec<u16>>,
}

/// What the seeds of one pass run.
#[derive(Clone, Copy)]
enum Mode {
    /// One protocol for the whole program.
    One(ProtocolKind),
    /// Built-in policies mixed per allocation.
    Mixed,
    /// Built-in policies and the example user protocols mixed per allocation.
    User,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(nodes) = &args.scale {
        return scale(nodes, args.seed.unwrap_or(1));
    }
    if let Some(model) = args.model.as_deref() {
        return run_model(model, &args);
    }
    let protocols: Vec<Mode> = match args.protocol.as_str() {
        "both" => vec![Mode::One(ProtocolKind::Hlrc), Mode::One(ProtocolKind::Sc)],
        "mixed" => vec![Mode::Mixed],
        "user" => vec![Mode::User],
        "all" => vec![
            Mode::One(ProtocolKind::Hlrc),
            Mode::One(ProtocolKind::Sc),
            Mode::Mixed,
            Mode::User,
        ],
        p => match p.parse() {
            Ok(k) => vec![Mode::One(k)],
            Err(e) => {
                eprintln!("squall-sim: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start + args.seeds).collect(),
    };
    let shape = if args.water {
        squall_sim::Shape::Water
    } else if args.wide {
        squall_sim::Shape::Wide
    } else if args.long {
        squall_sim::Shape::Long
    } else {
        squall_sim::Shape::Short
    };
    for p in protocols {
        let name = match p {
            Mode::One(k) => k.name(),
            Mode::Mixed => "mixed",
            Mode::User => "user",
        };
        let mut total = ProtoStats::default();
        let mut events = 0u64;
        let mut resent = 0u64;
        let (mut fast, mut core) = (0u64, 0u64);
        let mut paths = squall_sim::BarrierPaths::default();
        let t0 = std::time::Instant::now();
        for &seed in &seeds {
            let run = match p {
                Mode::One(k) => squall_sim::run_shaped_seed(k, shape, seed, args.trace),
                Mode::Mixed => squall_sim::run_mixed_seed(shape, seed, args.trace),
                Mode::User => squall_sim::run_user_seed(shape, seed, args.trace),
            };
            match run {
                Ok(r) => {
                    events += r.events;
                    resent += r.retransmissions;
                    fast += r.lock_acquires_fast;
                    core += r.lock_acquires_core;
                    paths.merge(&r.barrier_paths);
                    total.merge(&r.stats);
                    if args.seed.is_some() {
                        println!(
                            "{} seed {seed}: ok ({}, {} events, virtual time {})",
                            name, r.program_kind, r.events, r.end_time
                        );
                    }
                }
                Err(e) => {
                    eprintln!("{name} seed {seed} FAILED: {e}");
                    let replay = match p {
                        Mode::One(k) => squall_sim::replay_shaped_command(k, shape, seed),
                        Mode::Mixed => squall_sim::replay_mixed_command(shape, seed),
                        Mode::User => squall_sim::replay_user_command(shape, seed),
                    };
                    eprintln!("replay: {replay}");
                    return ExitCode::FAILURE;
                }
            }
        }
        println!(
            "{}: {} seeds ok, {events} events, {} messages, {resent} datagrams retransmitted, {:.1}s",
            name,
            seeds.len(),
            total.messages(),
            t0.elapsed().as_secs_f64()
        );
        println!(
            "{}: total-count barriers in {} runs: {} episodes, {} eager infos, {} collects, \
             {} late threads, {} re-collects, {} threads carried",
            name,
            paths.runs,
            paths.episodes,
            paths.eager,
            paths.collects,
            paths.late,
            paths.recollects,
            paths.carried
        );
        println!(
            "{}: sync-core lock acquires: {fast} from the node-local lock cache, {core} through the core",
            name
        );
        if args.stats {
            match serde_json::to_string_pretty(&total) {
                Ok(j) => println!("{j}"),
                Err(e) => eprintln!("squall-sim: cannot print statistics: {e}"),
            }
        }
    }
    ExitCode::SUCCESS
}

/// `--model`: the seeds of another sharing model's simulator.
fn run_model(model: &str, args: &Args) -> ExitCode {
    match model {
        "regions" => {}
        "objects" => return run_objects(args),
        "gptr" => return gptr(args),
        _ => {
            eprintln!("squall-sim: unknown model {model} (known: regions, objects, gptr)");
            return ExitCode::from(2);
        }
    }
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start + args.seeds).collect(),
    };
    let t0 = std::time::Instant::now();
    let (mut events, mut messages, mut misses) = (0u64, 0u64, 0u64);
    for &seed in &seeds {
        match squall_sim::regions::run_seed(seed, args.trace) {
            Ok(r) => {
                events += r.events;
                messages += r.messages;
                misses += r.read_misses + r.write_misses;
            }
            Err(e) => {
                eprintln!("regions seed {seed} FAILED: {e}");
                eprintln!(
                    "replay: cargo run -p squall-sim --release -- --model regions --seed {seed} --trace"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "regions: {} seeds ok, {events} events, {messages} messages, {misses} misses, {:.1}s",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// `--model objects`: the shared-object engines against the sequential reference.
fn run_objects(args: &Args) -> ExitCode {
    let engine = match args
        .engine
        .as_deref()
        .map(str::parse::<squall_objects::Engine>)
    {
        None => None,
        Some(Ok(e)) => Some(e),
        Some(Err(e)) => {
            eprintln!("squall-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start + args.seeds).collect(),
    };
    let mut total = squall_objects::ObjectStats::default();
    let t0 = std::time::Instant::now();
    for &seed in &seeds {
        match squall_sim::objects::run_objects_seed(seed, engine, args.trace) {
            Ok(r) => {
                total.merge(&r.stats);
                if args.seed.is_some() {
                    println!(
                        "objects seed {seed}: ok ({}, {} ops, {} events)",
                        r.engine, r.ops, r.events
                    );
                }
            }
            Err(e) => {
                eprintln!("objects seed {seed} FAILED: {e}");
                eprintln!("replay: squall-sim --model objects --seed {seed} --trace");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "objects: {} seeds ok, {:.1}s",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    if args.stats {
        match serde_json::to_string_pretty(&total) {
            Ok(j) => println!("{j}"),
            Err(e) => eprintln!("squall-sim: cannot print statistics: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// `--model gptr`: the one-sided engine's seeds.
fn gptr(args: &Args) -> ExitCode {
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start + args.seeds).collect(),
    };
    let t0 = std::time::Instant::now();
    let (mut ops, mut events, mut refused, mut resent) = (0u64, 0u64, 0u64, 0u64);
    for &seed in &seeds {
        match squall_sim::gptr::run_gptr_seed(seed, args.trace) {
            Ok(r) => {
                ops += r.ops;
                events += r.events;
                refused += r.refused;
                resent += r.retransmissions;
                if args.seed.is_some() {
                    println!(
                        "gptr seed {seed}: ok ({} nodes, {} ops, {} events)",
                        r.nodes, r.ops, r.events
                    );
                }
            }
            Err(e) => {
                eprintln!("gptr seed {seed} FAILED: {e}");
                eprintln!("replay: {}", squall_sim::gptr::replay_command(seed));
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "gptr: {} seeds ok, {ops} operations ({refused} refused as expected), {events} events, \
         {resent} datagrams retransmitted, {:.1}s",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// `--scale`: the table of costs per operation, then its JSON.
fn scale(nodes: &[u16], seed: u64) -> ExitCode {
    let mut rows = Vec::new();
    for &n in nodes {
        if n < 2 {
            eprintln!("squall-sim: --scale needs node counts of at least 2");
            return ExitCode::from(2);
        }
        let t0 = std::time::Instant::now();
        match squall_sim::scale::measure(n, seed) {
            Ok(r) => {
                eprintln!("{n} nodes: {:.1}s", t0.elapsed().as_secs_f64());
                rows.push(r);
            }
            Err(e) => {
                eprintln!("squall-sim: scale at {n} nodes FAILED: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let (table, json) = squall_sim::scale::render(&rows);
    print!("{table}");
    println!("{json}");
    ExitCode::SUCCESS
}
