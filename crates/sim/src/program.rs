//! Simulated programs: random data-race-free programs (every shared word protected by a lock,
//! or written in a barrier phase by one thread) and racy litmus programs for `sc`, with the set
//! of sequentially consistent outcomes computed by enumerating interleavings.
//!
//! Owns: program generation from a seeded RNG and the SC outcome oracle. Must not touch:
//! protocol cores or the network.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use squall_core::{AllocInfo, HeapLayout, NodeId, PageId, Placement, PAGE_SIZE};
use squall_protocol::Coherence;
use std::collections::{BTreeMap, BTreeSet};

/// A shared word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Var {
    pub page: PageId,
    pub offset: usize,
}

/// One operation of a simulated thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read a var; the value is checked against the reference execution.
    Read(usize),
    /// Write a var.
    Write(usize, u64),
    /// Add to a var held under its lock, as `x += d` compiles: a load (checked like `Read`),
    /// then, a little later (the protocol may act in between: a thread between its load and
    /// its store), a store of the loaded value plus `d`.
    Add(usize, u64),
    Lock(u64),
    Unlock(u64),
    /// Wait for all threads.
    Barrier,
    /// Remote fetch-and-add of 1 at the var's home.
    FetchAdd(usize),
    /// Racy read whose value is recorded as an outcome (litmus).
    Observe(usize),
    /// Racy read that is neither checked nor recorded (warm-up).
    Peek(usize),
    /// Racy spin until the var holds the value.
    SpinUntil(usize, u64),
}

/// What the run is checked against.
#[derive(Debug, Clone)]
pub enum Check {
    /// Data-race-free: every `Read` equals the reference memory at that moment.
    Reference,
    /// Racy litmus: the observed outcome must be one of these (sequentially consistent) ones.
    Outcomes {
        name: &'static str,
        allowed: BTreeSet<Vec<u64>>,
    },
}

/// A whole simulated program and its placement in the global range.
#[derive(Debug, Clone)]
pub struct Program {
    pub layout: HeapLayout,
    /// `(manager, allocation)`: registered on the manager node.
    pub allocs: Vec<(NodeId, AllocInfo)>,
    /// The coherence policy of each allocation (`None`: the run's default).
    pub policies: Vec<Option<Coherence>>,
    pub vars: Vec<Var>,
    /// Node of each thread.
    pub threads: Vec<NodeId>,
    pub ops: Vec<Vec<Op>>,
    pub check: Check,
}

const SLOTS: &[usize] = &[0, 8, 16, 24, 64, 2048, 4088];
const PAGES_PER_NODE: u64 = 8;
const PAGE_BYTES: usize = PAGE_SIZE;

fn random_placement(rng: &mut ChaCha8Rng, nodes: u16) -> Placement {
    match rng.gen_range(0..5) {
        0 | 1 => Placement::FirstTouch,
        2 => Placement::RoundRobin {
            block_pages: rng.gen_range(1..=2),
        },
        3 => Placement::Blocked,
        _ => Placement::Node(NodeId(rng.gen_range(0..nodes))),
    }
}

/// Allocations and `count` distinct vars on their pages.
fn layout_vars(
    rng: &mut ChaCha8Rng,
    nodes: u16,
    count: usize,
    shape: Shape,
) -> (HeapLayout, Vec<(NodeId, AllocInfo)>, Vec<Var>) {
    let per_node = if shape == Shape::Wide {
        4 * PAGES_PER_NODE
    } else {
        PAGES_PER_NODE
    };
    let layout = HeapLayout {
        nodes,
        total_pages: u64::from(nodes) * per_node,
    };
    let max_pages = if shape == Shape::Wide { 24 } else { 3 };
    let mut allocs = Vec::new();
    for n in 0..nodes {
        if allocs.is_empty() && n + 1 == nodes || rng.gen_bool(0.6) {
            let node = NodeId(n);
            allocs.push((
                node,
                AllocInfo {
                    first: layout.arena_start(node),
                    pages: rng.gen_range(1..=max_pages),
                    placement: random_placement(rng, nodes),
                },
            ));
        }
    }
    let mut cells: Vec<Var> = Vec::new();
    for (_, a) in &allocs {
        for p in 0..a.pages {
            for &offset in SLOTS {
                cells.push(Var {
                    page: PageId(a.first.0 + p),
                    offset,
                });
            }
        }
    }
    cells.shuffle(rng);
    // Cluster vars on few pages now and then (false sharing).
    if rng.gen_bool(0.5) {
        cells.sort_by_key(|v| v.page);
    }
    if shape == Shape::Wide && rng.gen_bool(0.5) {
        // One var per page on consecutive pages: runs of pages for read-ahead, run
        // handovers and home look-ups.
        let mut seen = std::collections::BTreeSet::new();
        cells.retain(|v| seen.insert(v.page));
        cells.sort_by_key(|v| v.page);
    }
    cells.truncate(count.max(1));
    (layout, allocs, cells)
}

/// Thread → node map: every node gets at least one thread.
fn place_threads(rng: &mut ChaCha8Rng, nodes: u16, threads: usize) -> Vec<NodeId> {
    (0..threads)
        .map(|t| {
            if t < usize::from(nodes) {
                NodeId(t as u16)
            } else {
                NodeId(rng.gen_range(0..nodes))
            }
        })
        .collect()
}

/// The value of the `n`-th write of a program (n >= 1): distinct for the first 65 535 writes,
/// and every byte is one of 0..=3, so two values agree in many bytes, as successive values of
/// an accumulator do. A diff only carries the bytes that differ from the twin: a home that
/// applies one over a stale base, or a writer whose twin is stale, then leaves a mix of two
/// values that a later read catches (with unrelated random values the diff would carry all
/// eight bytes and hide it).
pub fn narrow_value(n: u64) -> u64 {
    (0..8).fold(0, |v, i| {
        let byte = ((n >> i) & 1) | (((n >> (8 + i)) & 1) << 1);
        v | (byte << (8 * i))
    })
}

/// How big a random program is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// 1-3 phases of 1-5 operations per thread, 3-8 vars, 1-3 locks (the default).
    #[default]
    Short,
    /// 4-8 phases of 3-12 operations per thread, 6-16 vars, 2-6 locks, more threads per node:
    /// longer histories of migrating pages, homes and lock tokens (Water's pattern).
    Long,
    /// `Long` over allocations of up to 24 pages, half of the seeds with one var per page on
    /// consecutive pages (runs for read-ahead, run handovers and home look-ups).
    Wide,
    /// Water's sharing pattern (see [`random_water`]): molecules of 288 bytes packed ~14 per
    /// page, a lock per molecule, every thread adding to every molecule's force in turn,
    /// owners writing their molecules' positions between barriers.
    Water,
}

/// A random data-race-free program.
pub fn random_drf(rng: &mut ChaCha8Rng, shape: Shape) -> Program {
    if shape == Shape::Water {
        return random_water(rng);
    }
    let long = shape != Shape::Short;
    let nodes: u16 = rng.gen_range(2..=4);
    let threads = if rng.gen_bool(if long { 0.6 } else { 0.3 }) {
        usize::from(nodes) + rng.gen_range(1..=usize::from(nodes))
    } else {
        usize::from(nodes)
    };
    let nvars = if long {
        rng.gen_range(6..=16)
    } else {
        rng.gen_range(3..=8)
    };
    let with_atomic = rng.gen_bool(0.4);
    let (layout, allocs, vars) = layout_vars(rng, nodes, nvars + usize::from(with_atomic), shape);
    let atomic = if with_atomic && vars.len() > 1 {
        Some(vars.len() - 1)
    } else {
        None
    };
    let plain: Vec<usize> = (0..vars.len()).filter(|v| Some(*v) != atomic).collect();
    let nlocks: u64 = if long {
        rng.gen_range(2..=6)
    } else {
        rng.gen_range(1..=3)
    };
    // Guard of each plain var: Some(lock) or None (barrier-phase var).
    let guard: BTreeMap<usize, Option<u64>> = plain
        .iter()
        .map(|&v| {
            let g = if rng.gen_bool(0.55) {
                Some(rng.gen_range(0..nlocks))
            } else {
                None
            };
            (v, g)
        })
        .collect();
    let tmap = place_threads(rng, nodes, threads);
    let mut ops: Vec<Vec<Op>> = vec![Vec::new(); threads];
    let mut written = 0u64;
    let phases = if long {
        rng.gen_range(4..=8)
    } else {
        rng.gen_range(1..=3)
    };
    let per_phase = if long { 3..=12 } else { 1..=5 };
    for _ in 0..phases {
        // Per phase, a barrier var is owned by one thread (only it touches the var) or read-only.
        let owner: BTreeMap<usize, Option<usize>> = guard
            .iter()
            .filter(|(_, g)| g.is_none())
            .map(|(&v, _)| {
                let o = if rng.gen_bool(0.3) {
                    None
                } else {
                    Some(rng.gen_range(0..threads))
                };
                (v, o)
            })
            .collect();
        for (t, list) in ops.iter_mut().enumerate() {
            for _ in 0..rng.gen_range(per_phase.clone()) {
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let l = rng.gen_range(0..nlocks);
                        let mine: Vec<usize> = guard
                            .iter()
                            .filter(|(_, g)| **g == Some(l))
                            .map(|(&v, _)| v)
                            .collect();
                        if mine.is_empty() {
                            continue;
                        }
                        list.push(Op::Lock(l));
                        for _ in 0..rng.gen_range(1..=3) {
                            let v = mine[rng.gen_range(0..mine.len())];
                            if rng.gen_bool(0.5) {
                                written += 1;
                                // Long programs turn every third write under a lock into an
                                // add of one byte's worth (no extra draws: the rest of the
                                // program stays the same).
                                list.push(if long && written.is_multiple_of(3) {
                                    Op::Add(v, 1 << (8 * ((written / 3) % 3)))
                                } else {
                                    Op::Write(v, narrow_value(written))
                                });
                            } else {
                                list.push(Op::Read(v));
                            }
                        }
                        list.push(Op::Unlock(l));
                    }
                    5..=8 => {
                        let cands: Vec<(usize, bool)> = owner
                            .iter()
                            .filter_map(|(&v, o)| match o {
                                Some(o) if *o == t => Some((v, true)),
                                None => Some((v, false)),
                                _ => None,
                            })
                            .collect();
                        if cands.is_empty() {
                            continue;
                        }
                        let (v, may_write) = cands[rng.gen_range(0..cands.len())];
                        if may_write && rng.gen_bool(0.6) {
                            written += 1;
                            list.push(Op::Write(v, narrow_value(written)));
                        } else {
                            list.push(Op::Read(v));
                        }
                    }
                    _ => {
                        if let Some(a) = atomic {
                            list.push(Op::FetchAdd(a));
                        }
                    }
                }
            }
            list.push(Op::Barrier);
        }
    }
    final_reads(&mut ops, &plain, 0.7, rng);
    drf_program(layout, allocs, vars, tmap, ops)
}

/// The final phase of a data-race-free program: every thread reads each of `vars` with
/// probability `p`.
fn final_reads(ops: &mut [Vec<Op>], vars: &[usize], p: f64, rng: &mut ChaCha8Rng) {
    for list in ops.iter_mut() {
        for &v in vars {
            if rng.gen_bool(p) {
                list.push(Op::Read(v));
            }
        }
    }
}

/// A data-race-free program checked against the sequential reference, every allocation
/// under the run's default policy.
fn drf_program(
    layout: HeapLayout,
    allocs: Vec<(NodeId, AllocInfo)>,
    vars: Vec<Var>,
    threads: Vec<NodeId>,
    ops: Vec<Vec<Op>>,
) -> Program {
    Program {
        layout,
        policies: vec![None; allocs.len()],
        allocs,
        vars,
        threads,
        ops,
        check: Check::Reference,
    }
}

/// Bytes of one Water molecule (`struct mol_dummy`: 288 bytes, ~14 per 4 KiB page).
pub const MOLECULE_BYTES: usize = 288;

/// Water's pattern (SPLASH-2 water-nsquared, the runtime's `apps/water`) as a data-race-free
/// program: 2-4 nodes (mostly 4) of 1-3 threads each (mostly 2), 8-32 molecules of
/// [`MOLECULE_BYTES`] in one array over 1-4 pages (plus one if the array starts mid-page),
/// each with a position word and 1-2 force words, and a lock per molecule. Each of 3-8 rounds:
/// (a) each thread writes its own (contiguous block of) molecules' positions and now and then
/// resets or reads their forces, without locks; barrier; (b) each thread reads positions
/// (without locks: nobody writes them in this phase) and, for every molecule in turn starting at an offset rotated by its thread id
/// (sometimes twice around), locks the molecule, adds its thread-specific constant to the
/// force words (`Op::Add`: load, then store) and unlocks; on some seeds a global sum under a
/// global lock at the end (Water's `PotengLock`); barrier. Final phase: everybody reads
/// everything. The added constants are one byte's worth each (`1 << 8*(t%8)`), so successive
/// values of a force agree in most bytes and a diff over a stale base leaves a blend.
pub fn random_water(rng: &mut ChaCha8Rng) -> Program {
    let nodes: u16 = if rng.gen_bool(0.7) {
        4
    } else {
        rng.gen_range(2..=3)
    };
    let tpn: usize = match rng.gen_range(0..10) {
        0 | 1 => 1,
        2 | 3 => 3,
        _ => 2,
    };
    let threads = usize::from(nodes) * tpn;
    // Water's threads: consecutive ids on one node (mostly), or round-robin over nodes.
    let block = rng.gen_bool(0.7);
    let tmap: Vec<NodeId> = (0..threads)
        .map(|t| {
            NodeId(if block {
                (t / tpn) as u16
            } else {
                (t % usize::from(nodes)) as u16
            })
        })
        .collect();
    let pages: u64 = rng.gen_range(1..=4);
    let per_page = PAGE_BYTES / MOLECULE_BYTES;
    let nmol = rng
        .gen_range(8..=32usize)
        .min(per_page * pages as usize)
        .max(8.min(per_page * pages as usize));
    // The array starts at the page start or somewhere in it (word-aligned), like a heap
    // allocation after others.
    let start = if rng.gen_bool(0.5) {
        0
    } else {
        8 * rng.gen_range(0..PAGE_BYTES / 8)
    };
    let span = start + nmol * MOLECULE_BYTES;
    let pages = (span as u64).div_ceil(PAGE_BYTES as u64);
    let layout = HeapLayout {
        nodes,
        total_pages: u64::from(nodes) * PAGES_PER_NODE,
    };
    let manager = NodeId(if rng.gen_bool(0.6) {
        0
    } else {
        rng.gen_range(0..nodes)
    });
    let placement = if rng.gen_bool(0.6) {
        Placement::FirstTouch
    } else {
        random_placement(rng, nodes)
    };
    let first = layout.arena_start(manager);
    let allocs = vec![(
        manager,
        AllocInfo {
            first,
            pages,
            placement,
        },
    )];
    // Word offsets inside a molecule: the position, then 1-2 force words elsewhere in it.
    let words = MOLECULE_BYTES / 8;
    let pos_word = rng.gen_range(0..words);
    let nforce = rng.gen_range(1..=2);
    let mut force_words = Vec::new();
    while force_words.len() < nforce {
        let w = rng.gen_range(0..words);
        if w != pos_word && !force_words.contains(&w) {
            force_words.push(w);
        }
    }
    let var_at = |m: usize, w: usize| {
        let byte = start + m * MOLECULE_BYTES + 8 * w;
        Var {
            page: PageId(first.0 + (byte / PAGE_BYTES) as u64),
            offset: byte % PAGE_BYTES,
        }
    };
    // Vars: per molecule its position, then its force words; then the global sum.
    let mut vars = Vec::new();
    let mut pos = Vec::new();
    let mut force: Vec<Vec<usize>> = Vec::new();
    for m in 0..nmol {
        pos.push(vars.len());
        vars.push(var_at(m, pos_word));
        force.push(
            force_words
                .iter()
                .map(|&w| {
                    vars.push(var_at(m, w));
                    vars.len() - 1
                })
                .collect(),
        );
    }
    // The global sum (Water's potential energy under `PotengLock`), on some seeds: just
    // after the molecules in the array's last page, when there is room.
    let global_lock = nmol as u64;
    let global = if rng.gen_bool(0.5) && span + 8 <= pages as usize * PAGE_BYTES {
        let byte = span.next_multiple_of(8);
        vars.push(Var {
            page: PageId(first.0 + (byte / PAGE_BYTES) as u64),
            offset: byte % PAGE_BYTES,
        });
        Some(vars.len() - 1)
    } else {
        None
    };
    // Owners: contiguous blocks of molecules (Water's partition).
    let owner = |m: usize| m * threads / nmol;
    let delta = |t: usize| 1u64 << (8 * (t % 8));
    let rounds = rng.gen_range(3..=8);
    let mut ops: Vec<Vec<Op>> = vec![Vec::new(); threads];
    let mut written = 0u64;
    for _ in 0..rounds {
        // (a) Owners write their molecules' positions (and reset or read forces), no locks;
        // nobody else touches them in this phase.
        for (t, list) in ops.iter_mut().enumerate() {
            for m in 0..nmol {
                if owner(m) == t {
                    if rng.gen_bool(0.5) {
                        for &f in &force[m] {
                            list.push(Op::Read(f));
                        }
                    }
                    written += 1;
                    list.push(Op::Write(pos[m], narrow_value(written)));
                    if rng.gen_bool(0.4) {
                        for &f in &force[m] {
                            written += 1;
                            list.push(Op::Write(f, narrow_value(written)));
                        }
                    }
                }
            }
            list.push(Op::Barrier);
        }
        // (b) Every thread adds to every molecule's force under the molecule's lock.
        for (t, list) in ops.iter_mut().enumerate() {
            let base = t * nmol / threads;
            let laps = if rng.gen_bool(0.25) { 2 } else { 1 };
            for i in 0..laps * nmol {
                let m = (base + i) % nmol;
                if rng.gen_bool(0.2) {
                    list.push(Op::Read(pos[m]));
                }
                list.push(Op::Lock(m as u64));
                for &f in &force[m] {
                    list.push(Op::Add(f, delta(t)));
                }
                list.push(Op::Unlock(m as u64));
            }
            if let Some(g) = global {
                list.push(Op::Lock(global_lock));
                list.push(Op::Add(g, delta(t)));
                list.push(Op::Unlock(global_lock));
            }
            list.push(Op::Barrier);
        }
    }
    let all: Vec<usize> = (0..vars.len()).collect();
    final_reads(&mut ops, &all, 0.5, rng);
    drf_program(layout, allocs, vars, tmap, ops)
}

/// A racy litmus program (for `sc`): message passing, store buffering, IRIW, a flag handoff,
/// or a small random racy program.
pub fn random_litmus(rng: &mut ChaCha8Rng) -> Program {
    let which = rng.gen_range(0..5);
    let (name, nvars, body): (&'static str, usize, Vec<Vec<Op>>) = match which {
        0 => (
            "message-passing",
            2,
            vec![
                vec![Op::Write(0, 1), Op::Write(1, 1)],
                vec![Op::Observe(1), Op::Observe(0)],
            ],
        ),
        1 => (
            "store-buffering",
            2,
            vec![
                vec![Op::Write(0, 1), Op::Observe(1)],
                vec![Op::Write(1, 1), Op::Observe(0)],
            ],
        ),
        2 => (
            "iriw",
            2,
            vec![
                vec![Op::Write(0, 1)],
                vec![Op::Write(1, 1)],
                vec![Op::Observe(0), Op::Observe(1)],
                vec![Op::Observe(1), Op::Observe(0)],
            ],
        ),
        3 => (
            "flag-handoff",
            2,
            vec![
                vec![Op::Write(0, 42), Op::Write(1, 1)],
                vec![Op::SpinUntil(1, 1), Op::Observe(0)],
            ],
        ),
        _ => {
            let threads = rng.gen_range(2..=3);
            let nv = rng.gen_range(1..=3);
            let mut body = Vec::new();
            let mut val = 0u64;
            for _ in 0..threads {
                let mut t = Vec::new();
                for _ in 0..rng.gen_range(1..=3) {
                    let v = rng.gen_range(0..nv);
                    if rng.gen_bool(0.5) {
                        val += 1;
                        t.push(Op::Write(v, val));
                    } else {
                        t.push(Op::Observe(v));
                    }
                }
                body.push(t);
            }
            ("random-racy", nv, body)
        }
    };
    let threads = body.len();
    let nodes = rng.gen_range(2..=4).min(threads as u16).max(2);
    let (layout, allocs, vars) = layout_vars(rng, nodes, nvars, Shape::Short);
    // Several vars may share a page; spread them when there are enough cells.
    let nvars_real = vars.len();
    let remap = |v: usize| v % nvars_real;
    let body: Vec<Vec<Op>> = body
        .into_iter()
        .map(|t| {
            t.into_iter()
                .map(|op| match op {
                    Op::Write(v, x) => Op::Write(remap(v), x),
                    Op::Observe(v) => Op::Observe(remap(v)),
                    Op::SpinUntil(v, x) => Op::SpinUntil(remap(v), x),
                    other => other,
                })
                .collect()
        })
        .collect();
    let allowed = sc_outcomes(&body, nvars_real);
    let tmap = place_threads(rng, nodes, threads);
    let ops = body
        .into_iter()
        .map(|t| {
            let mut list = Vec::new();
            // Warm-up: put copies of the vars' pages in random states first.
            for v in 0..nvars_real {
                if rng.gen_bool(0.4) {
                    list.push(Op::Peek(v));
                }
            }
            list.push(Op::Barrier);
            list.extend(t);
            list
        })
        .collect();
    Program {
        layout,
        policies: vec![None; allocs.len()],
        allocs,
        vars,
        threads: tmap,
        ops,
        check: Check::Outcomes { name, allowed },
    }
}

/// Every outcome (observed values in thread order, then op order) of a sequentially
/// consistent execution of `body`, by enumerating interleavings.
pub fn sc_outcomes(body: &[Vec<Op>], nvars: usize) -> BTreeSet<Vec<u64>> {
    let mut out = BTreeSet::new();
    let mut pcs = vec![0usize; body.len()];
    let mut mem = vec![0u64; nvars];
    let mut obs: Vec<Vec<u64>> = vec![Vec::new(); body.len()];
    explore(body, &mut pcs, &mut mem, &mut obs, &mut out);
    out
}

fn explore(
    body: &[Vec<Op>],
    pcs: &mut [usize],
    mem: &mut [u64],
    obs: &mut [Vec<u64>],
    out: &mut BTreeSet<Vec<u64>>,
) {
    let mut any = false;
    for t in 0..body.len() {
        let Some(&op) = body[t].get(pcs[t]) else {
            continue;
        };
        match op {
            Op::Write(v, x) => {
                let old = mem[v];
                mem[v] = x;
                pcs[t] += 1;
                explore(body, pcs, mem, obs, out);
                pcs[t] -= 1;
                mem[v] = old;
                any = true;
            }
            Op::Observe(v) => {
                obs[t].push(mem[v]);
                pcs[t] += 1;
                explore(body, pcs, mem, obs, out);
                pcs[t] -= 1;
                obs[t].pop();
                any = true;
            }
            Op::SpinUntil(v, x) => {
                if mem[v] == x {
                    pcs[t] += 1;
                    explore(body, pcs, mem, obs, out);
                    pcs[t] -= 1;
                    any = true;
                }
            }
            _ => {
                pcs[t] += 1;
                explore(body, pcs, mem, obs, out);
                pcs[t] -= 1;
                any = true;
            }
        }
    }
    if !any {
        out.insert(obs.concat());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sc_oracle_forbids_the_classic_relaxed_outcomes() {
        let sb = vec![
            vec![Op::Write(0, 1), Op::Observe(1)],
            vec![Op::Write(1, 1), Op::Observe(0)],
        ];
        let o = sc_outcomes(&sb, 2);
        assert!(!o.contains(&vec![0, 0]));
        assert_eq!(o.len(), 3);
        let mp = vec![
            vec![Op::Write(0, 1), Op::Write(1, 1)],
            vec![Op::Observe(1), Op::Observe(0)],
        ];
        let o = sc_outcomes(&mp, 2);
        assert!(!o.contains(&vec![1, 0]));
        assert!(o.contains(&vec![1, 1]));
    }

    #[test]
    fn narrow_values_are_distinct_nonzero_and_small_byted() {
        let vals: BTreeSet<u64> = (1..=65_535).map(narrow_value).collect();
        assert_eq!(vals.len(), 65_535);
        assert!(!vals.contains(&0));
        assert!(vals.iter().all(|v| v.to_le_bytes().iter().all(|&b| b <= 3)));
    }
}
