//! `genetic` for `squall bench objects` (seed 004 §4.2, Figure 10): an iterative genetic
//! algorithm that "breeds" a 64-bit target integer from a random population kept in shared
//! objects, on each engine, and the same computation on page-based shared memory and
//! sequentially (plain vectors) for the comparison and the check.
//!
//! The algorithm is apps/genetic's (the page-based C app): fitness of a genome x = for every
//! base b = 2..B, the number of the target's base-b digit positions where x has the same digit
//! (the "think time": private computation, no shared access); the population is kept sorted
//! (fitness, then genome: a total order). A generation has the seed's two phases, a
//! `DSM_Barrier` after each because the reader/writer roles change:
//! 1. breed: every node *reads* parents from the shared population (rank-biased selection:
//!    the smaller of two uniform ranks, twice) and *writes* its block of the P/2 offspring
//!    slots (uniform crossover, up to two bit-flip mutations, its fitness evaluated);
//! 2. remove the least fit: every node *reads* the fitter old half and all offspring, ranks
//!    them (the new population is their sorted union: the less fit old half is removed) and
//!    *writes* its block of the other population buffer. The buffers alternate by generation.
//!
//! Offspring k of generation g uses a PRNG seeded by (seed, g, k), so the answer does not
//! depend on the node count: OU and MSI (sequentially consistent) must give exactly the
//! sequential population. NC promises no consistency; what it does promise — `Write()` is
//! atomic per element, own writes read back — is checked: every individual read at the end is
//! whole (its fitness is its genome's), and whether the population equals the sequential one
//! is reported. An individual is a 16-byte record (genome, fitness), one element.
//!
//! Owns this workload only; uses the public object API (`squall::objects`) and `SharedArray`.
use super::{dsm, NodeError};
use squall::objects::{self, ElemKind, Engine, ObjectId, ObjectSpec};
use squall::{Node, Placement};
use std::time::Instant;

/// Workload size: population P (even), generations G, largest fitness base B, PRNG seed.
#[derive(Debug, Clone, Copy)]
pub struct GaSize {
    pub pop: usize,
    pub gens: usize,
    pub bases: u64,
    pub seed: u64,
}

/// One individual: its genome and that genome's fitness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ind {
    pub genome: u64,
    pub fitness: i64,
}

impl Ind {
    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.genome.to_le_bytes());
        b[8..].copy_from_slice(&self.fitness.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8; 16]) -> Ind {
        let mut g = [0u8; 8];
        let mut f = [0u8; 8];
        g.copy_from_slice(&b[..8]);
        f.copy_from_slice(&b[8..]);
        Ind {
            genome: u64::from_le_bytes(g),
            fitness: i64::from_le_bytes(f),
        }
    }

    /// Fittest first; ties by genome: a total order.
    fn order(a: &Ind, b: &Ind) -> std::cmp::Ordering {
        b.fitness.cmp(&a.fitness).then(a.genome.cmp(&b.genome))
    }
}

/// The result of one run: the final population (sorted) as a checksum and its best member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaResult {
    pub checksum: u64,
    pub best: Ind,
}

fn summarize(pop: &[Ind]) -> GaResult {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for i in pop {
        for w in [i.genome, i.fitness as u64] {
            h = (h ^ w).wrapping_mul(0x100_0000_01b3);
        }
    }
    GaResult {
        checksum: h,
        best: pop.first().copied().unwrap_or(Ind {
            genome: 0,
            fitness: 0,
        }),
    }
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn below(r: &mut u64, n: u64) -> u64 {
    splitmix(r) % n.max(1)
}

fn fitness(x: u64, target: u64, bases: u64) -> i64 {
    let mut f = 0;
    for b in 2..=bases {
        let (mut u, mut v) = (x, target);
        while v != 0 {
            f += i64::from(u % b == v % b);
            u /= b;
            v /= b;
        }
    }
    f
}

fn target(s: &GaSize) -> u64 {
    let mut r = s.seed ^ 0x7a67_e7a6;
    splitmix(&mut r)
}

/// The initial population, sorted (every node computes it; each writes its block).
fn initial(s: &GaSize) -> Vec<Ind> {
    let t = target(s);
    let mut r = s.seed;
    let mut v: Vec<Ind> = (0..s.pop)
        .map(|_| {
            let genome = splitmix(&mut r);
            Ind {
                genome,
                fitness: fitness(genome, t, s.bases),
            }
        })
        .collect();
    v.sort_by(Ind::order);
    v
}

/// Offspring `k` of generation `gen`, its parents' genomes read through `genome(rank)` from
/// the sorted population.
fn breed<E>(
    s: &GaSize,
    gen: usize,
    k: usize,
    mut genome: impl FnMut(usize) -> Result<u64, E>,
) -> Result<Ind, E> {
    let mut r = s.seed ^ ((gen as u64) << 40) ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let p = s.pop as u64;
    let (i1, i2, j1, j2) = (
        below(&mut r, p),
        below(&mut r, p),
        below(&mut r, p),
        below(&mut r, p),
    );
    let pa = genome(i1.min(i2) as usize)?;
    let pb = genome(j1.min(j2) as usize)?;
    let mask = splitmix(&mut r);
    let mut g = (pa & mask) | (pb & !mask);
    for _ in 0..2 {
        if below(&mut r, 2) == 1 {
            g ^= 1 << below(&mut r, 64);
        }
    }
    Ok(Ind {
        genome: g,
        fitness: fitness(g, target(s), s.bases),
    })
}

/// The whole algorithm on plain vectors: the reference.
pub fn sequential(s: &GaSize) -> GaResult {
    let half = s.pop / 2;
    let mut cur = initial(s);
    for gen in 0..s.gens {
        let off: Vec<Ind> = (0..half)
            .map(|k| breed(s, gen, k, |i| Ok::<u64, ()>(cur[i].genome)).unwrap_or(cur[0]))
            .collect();
        cur.truncate(half);
        cur.extend(off);
        cur.sort_by(Ind::order);
    }
    summarize(&cur)
}

fn block(len: usize, n: usize, me: usize) -> std::ops::Range<usize> {
    let per = len.div_ceil(n);
    (me * per).min(len)..((me + 1) * per).min(len)
}

fn record_object(len: usize, seg: u32, engine: Engine) -> Result<ObjectId, NodeError> {
    objects::create(ObjectSpec {
        kind: ElemKind::Record(16),
        len: len as u64,
        seg_elems: seg,
        engine,
    })
    .map_err(dsm)
}

/// Where a distributed run keeps its population buffers and offspring slots: shared objects
/// or page-based shared memory.
trait Population {
    fn get(&self, i: usize) -> Result<Ind, NodeError>;
    fn put(&self, i: usize, v: Ind) -> Result<(), NodeError>;
}

/// A shared object of 16-byte records.
impl Population for ObjectId {
    fn get(&self, i: usize) -> Result<Ind, NodeError> {
        let mut b = [0u8; 16];
        objects::read_into(*self, i as u64, &mut b).map_err(dsm)?;
        Ok(Ind::from_bytes(&b))
    }

    fn put(&self, i: usize, v: Ind) -> Result<(), NodeError> {
        objects::write_from(*self, i as u64, &v.to_bytes()).map_err(dsm)
    }
}

/// A shared array, an individual as two adjacent words.
impl Population for squall::SharedArray<u64> {
    fn get(&self, i: usize) -> Result<Ind, NodeError> {
        Ok(Ind {
            genome: squall::SharedArray::get(self, 2 * i),
            fitness: squall::SharedArray::get(self, 2 * i + 1) as i64,
        })
    }

    fn put(&self, i: usize, v: Ind) -> Result<(), NodeError> {
        self.set(2 * i, v.genome);
        self.set(2 * i + 1, v.fitness as u64);
        Ok(())
    }
}

/// What a distributed run gives back: parallel-phase seconds, the result (node 0: of the
/// population it reads at the end) and whether every individual it read was whole.
pub struct GaRun {
    pub secs: f64,
    pub result: GaResult,
    pub whole: bool,
}

/// genetic over shared objects of `engine`, segments of `seg` individuals.
pub fn on_objects(node: &Node, engine: Engine, s: &GaSize, seg: u32) -> Result<GaRun, NodeError> {
    let bufs = [
        record_object(s.pop, seg, engine)?,
        record_object(s.pop, seg, engine)?,
    ];
    let off = record_object(s.pop / 2, seg, engine)?;
    run(node, s, &bufs, &off)
}

/// genetic on page-based shared memory (`SharedArray`, the run's page protocol): the same
/// phases and barriers, an individual as two adjacent words.
pub fn on_pages(node: &Node, s: &GaSize) -> Result<GaRun, NodeError> {
    let arr = |len| node.alloc_array_collective::<u64>(2 * len, Placement::Blocked);
    let bufs = [arr(s.pop).map_err(dsm)?, arr(s.pop).map_err(dsm)?];
    let off = arr(s.pop / 2).map_err(dsm)?;
    run(node, s, &bufs, &off)
}

/// The distributed algorithm over two population buffers and the offspring slots.
fn run<P: Population>(node: &Node, s: &GaSize, bufs: &[P; 2], off: &P) -> Result<GaRun, NodeError> {
    let n = usize::from(node.size());
    let me = usize::from(node.rank().0);
    let half = s.pop / 2;
    let init = initial(s);
    for i in block(s.pop, n, me) {
        bufs[0].put(i, init[i])?;
    }
    node.barrier().map_err(dsm)?;
    let t = Instant::now();
    let mut merged = Vec::with_capacity(s.pop);
    for gen in 0..s.gens {
        let (cur, next) = (&bufs[gen % 2], &bufs[(gen + 1) % 2]);
        // Phase 1: read parents, write my offspring slots.
        for k in block(half, n, me) {
            let child = breed(s, gen, k, |i| cur.get(i).map(|x| x.genome))?;
            off.put(k, child)?;
        }
        node.barrier().map_err(dsm)?;
        // Phase 2: read the fitter half and the offspring, write my block of the new order.
        merged.clear();
        for i in 0..half {
            merged.push(cur.get(i)?);
        }
        for k in 0..half {
            merged.push(off.get(k)?);
        }
        merged.sort_by(Ind::order);
        for i in block(s.pop, n, me) {
            next.put(i, merged[i])?;
        }
        node.barrier().map_err(dsm)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let fin = &bufs[s.gens % 2];
    let mut pop = Vec::new();
    if me == 0 {
        for i in 0..s.pop {
            pop.push(fin.get(i)?);
        }
    }
    node.barrier().map_err(dsm)?;
    let t = target(s);
    let whole = pop
        .iter()
        .all(|i| i.fitness == fitness(i.genome, t, s.bases));
    Ok(GaRun {
        secs,
        result: summarize(&pop),
        whole,
    })
}
