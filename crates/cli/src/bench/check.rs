//! Bounds of the `squall bench` options, checked before anything starts: each bad value is
//! an error naming the option and the fix (exit status 2), never a panic or an hour-long run.
//! Owns only these bounds; the drivers keep their own logic.
use super::BenchCmd;
use crate::settings::Bad;

/// Largest message a bench sends (bytes).
pub const MAX_MESSAGE: usize = 256 << 20;
/// Most repetitions or iterations taken (more is a typo).
const MAX_REPS: usize = 10_000;
const MAX_ITERS: u64 = 100_000_000;

fn count(opt: &str, v: u64, max: u64, example: &str) -> Result<(), Bad> {
    if v == 0 || v > max {
        return Err(Bad::new(
            opt,
            format!("{v} is not a count from 1 to {max}"),
            format!("give e.g. {opt} {example}"),
        ));
    }
    Ok(())
}

fn sizes(opt: &str, list: &[usize]) -> Result<(), Bad> {
    if list.is_empty() {
        return Err(Bad::new(
            opt,
            "no sizes given",
            format!("give e.g. {opt} 64,4k"),
        ));
    }
    for &s in list {
        if s == 0 || s > MAX_MESSAGE {
            return Err(Bad::new(
                opt,
                format!("{s} bytes is not a message size from 1 to {}", MAX_MESSAGE),
                format!("give sizes from 1 to 256m, e.g. {opt} 64,4k,1m"),
            ));
        }
    }
    Ok(())
}

fn node_counts(opt: &str, list: &[usize]) -> Result<(), Bad> {
    if list.is_empty() {
        return Err(Bad::new(
            opt,
            "no node counts given",
            format!("give e.g. {opt} 2,4"),
        ));
    }
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let nproc = crate::settings::soft_limit(&limits, "Max processes");
    for &n in list {
        crate::run::check_nodes(n, true, nproc).map_err(|b| Bad {
            setting: opt.into(),
            ..b
        })?;
    }
    Ok(())
}

fn transport(opt: &str, t: &str) -> Result<(), Bad> {
    if !matches!(t, "tcp" | "udp") {
        return Err(Bad::new(
            opt,
            format!("{t:?} is not a transport of this bench"),
            format!("give {opt} tcp or {opt} udp"),
        ));
    }
    Ok(())
}

/// Check the options of `cmd`.
pub fn check(cmd: &BenchCmd) -> Result<(), Bad> {
    match cmd {
        BenchCmd::Pingpong(a) => {
            sizes("--sizes", &a.sizes)?;
            count("--iters", a.iters as u64, MAX_ITERS, "1000")?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "5")
        }
        BenchCmd::Bandwidth(a) => {
            sizes("--sizes", &a.sizes)?;
            if a.bytes == 0 || a.bytes > 4 << 30 {
                return Err(Bad::new(
                    "--bytes",
                    format!("{} bytes is not a transfer from 1 byte to 4 GiB", a.bytes),
                    "give e.g. --bytes 16m",
                ));
            }
            count("--reps", a.reps as u64, MAX_REPS as u64, "5")
        }
        BenchCmd::Message(a) => {
            node_counts("--nodes", &[a.nodes])?;
            if a.nodes < 2 {
                return Err(Bad::new(
                    "--nodes",
                    "the message test needs at least 2 nodes",
                    "give -n 2 or more",
                ));
            }
            count("--messages", a.messages, MAX_ITERS, "100000")?;
            sizes("--size", &[a.size])?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "3")?;
            if let Some(f) = &a.net_faults {
                for t in a.transport.names() {
                    crate::run::check_net_faults(f, t)?;
                }
            }
            Ok(())
        }
        BenchCmd::Fault(a)
        | BenchCmd::Lock(a)
        | BenchCmd::Barrier(a)
        | BenchCmd::Thread(a)
        | BenchCmd::Gptr(a) => {
            transport("--transport", &a.transport)?;
            if let Some(i) = a.iters {
                count("--iters", i as u64, MAX_ITERS, "200")?;
            }
            count("--reps", a.reps as u64, MAX_REPS as u64, "5")?;
            node_counts("--nodes", &a.nodes)
        }
        BenchCmd::Costs(a) => {
            if let Some(i) = a.iters {
                count("--iters", i as u64, MAX_ITERS, "200")?;
            }
            count("--reps", a.reps as u64, MAX_REPS as u64, "5")?;
            node_counts("--barrier-nodes", &a.barrier_nodes)
        }
        BenchCmd::Regions(a) => {
            transport("--transport", &a.transport)?;
            sizes("--sizes", &a.sizes)?;
            count("--iters", a.iters as u64, MAX_ITERS, "200")?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "5")
        }
        BenchCmd::Objects(a) => {
            node_counts("--nodes", &a.nodes)?;
            count("--iters", a.w.iters as u64, MAX_ITERS, "200")?;
            count("--reps", a.w.reps as u64, MAX_REPS as u64, "3")?;
            count("--steps", a.w.steps as u64, MAX_ITERS, "10")?;
            count("--grid", a.w.grid as u64, 4096, "64")?;
            count("--range", a.w.range.max(0) as u64, 10_000, "120")
        }
        BenchCmd::Kernels(a) => {
            node_counts("--nodes", &[a.nodes])?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "3")?;
            count("--timeout", a.timeout, 7 * 24 * 3600, "600")
        }
        BenchCmd::Omp(a) => {
            node_counts("--nodes", &a.nodes)?;
            count("--threads-per-node", a.threads_per_node as u64, 256, "1")?;
            count("--ops", a.ops as u64, 1_000_000, "200")?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "3")?;
            count("--stencil-n", a.stencil_n as u64, 1 << 15, "1024")?;
            count("--stencil-iters", a.stencil_iters as u64, MAX_ITERS, "40")?;
            count("--matmul-n", a.matmul_n as u64, 1 << 14, "512")?;
            count("--timeout", a.timeout, 7 * 24 * 3600, "600")?;
            if let Some(p) = &a.prefix {
                if !p.join("lib/pkgconfig/squall-openmp.pc").is_file() {
                    return Err(Bad::new(
                        "--prefix",
                        format!("{} holds no lib/pkgconfig/squall-openmp.pc", p.display()),
                        "give the PREFIX of crates/capi/install.sh PREFIX",
                    ));
                }
            }
            Ok(())
        }
        BenchCmd::Apps(a) => {
            node_counts("--nodes", &a.nodes)?;
            count("--threads-per-node", a.threads_per_node as u64, 1024, "1")?;
            count("--reps", a.reps as u64, MAX_REPS as u64, "3")?;
            count("--timeout", a.timeout, 7 * 24 * 3600, "900")?;
            for (opt, dir) in [("--bin-dir", &a.bin_dir)] {
                if let Some(d) = dir {
                    if !d.is_dir() {
                        return Err(Bad::new(
                            opt,
                            format!("{} is not a directory", d.display()),
                            "give the directory holding the built apps, or leave it out",
                        ));
                    }
                }
            }
            if let Some(dir) = std::env::var_os(squall_core::env::APPS_BIN) {
                if a.bin_dir.is_none() && !std::path::Path::new(&dir).is_dir() {
                    return Err(Bad::new(
                        squall_core::env::APPS_BIN,
                        format!("{} is not a directory", dir.to_string_lossy()),
                        "point it at the folder `make -C apps` filled (apps/bin), or unset it",
                    ));
                }
            }
            if let Some(font) = std::env::var_os(squall_core::env::PLOT_FONT) {
                if !a.no_plots && !std::path::Path::new(&font).is_file() {
                    return Err(Bad::new(
                        squall_core::env::PLOT_FONT,
                        format!("{} is not a file", font.to_string_lossy()),
                        "give a .ttf file, unset it for DejaVu Sans, or pass --no-plots",
                    ));
                }
            }
            if a.out.exists() && !a.out.is_dir() {
                return Err(Bad::new(
                    "--out",
                    format!("{} exists and is not a directory", a.out.display()),
                    "give a directory for the results (created if missing), e.g. --out results",
                ));
            }
            if let Some(doc) = &a.results_md {
                // Missing directories are created; a file standing where one must be is not.
                let blocked = doc.ancestors().skip(1).any(|p| p.is_file());
                if doc.is_dir() || blocked {
                    return Err(Bad::new(
                        "--results-md",
                        format!(
                            "cannot write {}: a file stands in its path, or it is a directory",
                            doc.display()
                        ),
                        "give a file path, e.g. --results-md docs/results.md",
                    ));
                }
            }
            if let Some(f) = &a.from_json {
                if !f.is_file() {
                    return Err(Bad::new(
                        "--from-json",
                        format!("{} does not exist", f.display()),
                        "give an apps.json an earlier `squall bench apps` wrote",
                    ));
                }
            }
            Ok(())
        }
    }
}
