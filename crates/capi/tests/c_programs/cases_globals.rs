//! Cases for the shared sections: SQUALL_GLOBAL and unmarked (SPLASH-2 style) globals, the
//! node-local section, and a zero-initialised global that takes no file space.
use super::{job, job_output, sh, Cases, Env};
use std::path::Path;
use std::process::Command;

pub fn add(v: &mut Cases) {
    // SQUALL_GLOBAL variables: coherent, node 0 their home; the section holds only them.
    v.at_2_and_4("pthreads/globals", |env: &Env, nodes| {
        let exe = env.build_test("cc", "globals.c", "globals", Some("squall-pthread"))?;
        shared_sections_hold(
            &exe,
            &[
                "base_value",
                "message",
                "nthreads",
                "ran_on",
                "self_pointer",
                "slots",
                "st",
            ],
        )?;
        node_local_is_outside(&exe, "node_mark")?;
        job(&exe, &[&(2 * nodes).to_string()], nodes, "ok globals")
    });
    // Every global shared with no marking (SPLASH-2 style), while the C library's per-node
    // state (stdout, errno, getopt, __thread) keeps working on every node.
    v.at_2_and_4("pthreads/plain globals", |env: &Env, nodes| {
        let exe = env.build_test(
            "cc",
            "plain_globals.c",
            "plain_globals",
            Some("squall-pthread"),
        )?;
        shared_sections_hold(
            &exe,
            &["Global", "N", "P", "table", "zeros", "counter", "next_id"],
        )?;
        job(
            &exe,
            &["-p", &(2 * nodes).to_string(), "-n", "200000"],
            nodes,
            "ok plain globals",
        )
    });
    // A 256 MiB zero-initialised global: no file space, no memory until touched.
    v.at_2_and_4("pthreads/zero init", |env: &Env, nodes| {
        let exe = env.build_test("cc", "zero_init.c", "zero_init", Some("squall-pthread"))?;
        let size = std::fs::metadata(&exe).map_err(|e| e.to_string())?.len();
        if size > 1 << 20 {
            return Err(format!(
                "{} is {size} bytes: the zero-initialised array takes file space",
                exe.display()
            ));
        }
        let out = job_output(&exe, &[&(2 * nodes).to_string()], nodes, "ok zero init")?;
        println!("  executable {size} bytes; {}", out.join(" "));
        Ok(())
    });
}

/// The shared sections of `exe` (`squall_data`, `squall_bss`, made by squall-pthread.ld) start
/// and end on page boundaries, hold every one of `shared` and none of the C library's variables
/// the linker copies into the executable (`stdout`, `stderr`, `optarg`, `optind`), and the
/// zero-initialised one takes no file space (checked with `nm` and `readelf`).
fn shared_sections_hold(exe: &Path, shared: &[&str]) -> Result<(), String> {
    let out = sh(
        Command::new("nm").args(["-n", "--defined-only"]).arg(exe),
        "nm (install binutils)",
    )?;
    let syms: Vec<(u64, String)> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let addr = u64::from_str_radix(it.next()?, 16).ok()?;
            let _kind = it.next()?;
            let name = it.next()?;
            Some((addr, name.split('@').next().unwrap_or(name).to_string()))
        })
        .collect();
    let find = |name: &str| {
        syms.iter()
            .find(|(_, n)| n == name)
            .map(|(a, _)| *a)
            .ok_or_else(|| format!("{name} not in {}", exe.display()))
    };
    let mut ranges = Vec::new();
    for sec in ["squall_data", "squall_bss"] {
        let (start, stop) = (
            find(&format!("__start_{sec}"))?,
            find(&format!("__stop_{sec}"))?,
        );
        if start % 4096 != 0 || stop % 4096 != 0 || stop < start {
            return Err(format!("{sec} is {start:#x}..{stop:#x}: not whole pages"));
        }
        ranges.push((start, stop));
    }
    let inside = |a: u64| ranges.iter().any(|&(lo, hi)| a >= lo && a < hi);
    for name in shared {
        let a = find(name)?;
        if !inside(a) {
            return Err(format!(
                "{name} ({a:#x}) is outside the shared sections {ranges:x?}"
            ));
        }
    }
    for name in ["stdout", "stderr", "optarg", "optind"] {
        if let Some((a, _)) = syms.iter().find(|(_, n)| n == name) {
            if inside(*a) {
                return Err(format!(
                    "the C library's {name} ({a:#x}) is in the shared sections {ranges:x?}"
                ));
            }
        }
    }
    let sections = sh(
        Command::new("readelf").args(["-SW"]).arg(exe),
        "readelf (install binutils)",
    )?;
    let bss = sections
        .lines()
        .find(|l| l.contains(" squall_bss "))
        .ok_or_else(|| format!("no squall_bss section in {}", exe.display()))?;
    if !bss.contains("NOBITS") {
        return Err(format!("squall_bss takes file space: {bss}"));
    }
    Ok(())
}

/// `name` (a SQUALL_NODE_LOCAL variable) lies in the section squall_node_local, outside the
/// shared sections.
fn node_local_is_outside(exe: &Path, name: &str) -> Result<(), String> {
    let syms = sh(
        Command::new("objdump").args(["-t"]).arg(exe),
        "objdump (install binutils)",
    )?;
    let line = syms
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .ok_or_else(|| format!("{name} not in {}", exe.display()))?;
    if !line.contains("squall_node_local") {
        return Err(format!("{name} is not in squall_node_local: {line}"));
    }
    Ok(())
}
