//! Cases for the SPLASH-2 macros: programs in m4 macro style expanded with the installed
//! c.m4.squall (and, for their native answers, c-tests/c.m4.native), the Splash-3 fences.
use super::{job, job_with_input, native_answer, sh, Cases, Env};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub fn add(v: &mut Cases) {
    // A program in SPLASH-2 macro style, expanded with c.m4.squall.
    v.at_2_and_4("splash/sor", |env: &Env, nodes| {
        let c = m4(env, "sor.C")?;
        let exe = env.build("cc", &c, "sor_splash", Some("squall-pthread"))?;
        job(&exe, &["-p", &(2 * nodes).to_string()], nodes, "sor: ok")
    });
    // The Splash-3 fence macros across nodes: plain data handed back and forth behind a
    // Squall atomic flag, read after an acquire fence (without the fences' DSM release and
    // acquire the reader sees its stale cached copy).
    for nodes in [1usize, 2, 4] {
        v.add(format!("splash3/fences/{nodes} nodes"), move |env: &Env| {
            let c = m4(env, "fence.C")?;
            let exe = env.build("cc", &c, "fence_splash", Some("squall-pthread"))?;
            let other = if nodes == 1 { 0 } else { 1 };
            job(
                &exe,
                &["20", "4096"],
                nodes,
                &format!("fence: ok rounds=20 words=4096 node={other}"),
            )
        });
    }
    // SPLASH-style programs (issue 20 "Done when"), written as SPLASH-2 code is: the global
    // structure pointer and the sizes in plain globals set by main, input from stdin,
    // CREATE(fn, P), locks, condition variables and pauses in G_MALLOC'd structures, AGETL,
    // ROI marks, workers that G_MALLOC. Each checks itself against a sequential run and must
    // print the same answer line as its native pthreads build (c-tests/c.m4.native), at P = 4
    // on every node count of `splash_nodes()`.
    for (prog, input) in splash_programs() {
        let nodes = splash_nodes();
        let label = nodes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        v.add(format!("splash3/{prog}/{label} nodes"), move |env: &Env| {
            let src = format!("{prog}.C");
            let native_c = m4_with(env, &src, &env.src.join("c.m4.native"), "_native.c")?;
            let (want, _) = native_answer(
                env,
                "cc",
                &native_c,
                &format!("{prog}_native"),
                &["-p", "4"],
                Some(input.as_bytes()),
                &format!("{prog}: ok"),
            )?;
            let c = m4(env, &src)?;
            let exe = env.build("cc", &c, &format!("{prog}_splash"), Some("squall-pthread"))?;
            for &n in &nodes {
                let t = Instant::now();
                job_with_input(&exe, &["-p", "4"], n, &want, input.as_bytes(), &[])
                    .map_err(|e| format!("{n} node(s): {e}"))?;
                println!(
                    "    {prog} P=4 on {n} node(s): {want} ({:.2}s)",
                    t.elapsed().as_secs_f64()
                );
            }
            Ok(())
        });
    }
}

/// Node counts the SPLASH-style programs run at: 1, 2 and 4; `SQUALL_TEST_SPLASH_NODES=1,2,4`
/// overrides.
fn splash_nodes() -> Vec<usize> {
    if let Ok(v) = std::env::var("SQUALL_TEST_SPLASH_NODES") {
        let nodes: Vec<usize> = v.split(',').filter_map(|n| n.trim().parse().ok()).collect();
        if !nodes.is_empty() {
            return nodes;
        }
    }
    vec![1, 2, 4]
}

/// The SPLASH-style programs of c-tests/ and the stdin each reads (generated here, the same
/// for the native and the Squall runs).
fn splash_programs() -> Vec<(&'static str, String)> {
    let mut x: u64 = 0x5eed_1234_abcd_0001;
    let mut next = move |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let mut taskq = String::from("40 2000\n");
    for _ in 0..40 {
        let lo = next(200_000);
        taskq.push_str(&format!("{lo} {}\n", lo + 100 + next(20_000)));
    }
    // About 1.4 MB of numbers: more than a pipe holds, read by rank 0 alone.
    let n = 200_000;
    let mut histo = format!("{n} 61\n");
    for _ in 0..n {
        histo.push_str(&format!("{}\n", next(1_000_000)));
    }
    vec![
        ("radix", "200000 7\n".to_string()),
        ("taskq", taskq),
        ("jacobi", "64 600 2e-3\n".to_string()),
        ("histo", histo),
        ("nbody", "128 5 11\n".to_string()),
        ("pipeline", "300 17\n".to_string()),
    ]
}

/// Expand the m4-style SPLASH source `name` (in c-tests/) with the macro file `macros`; the
/// output is `name` with ".C" replaced by `ending`, beside the test binaries.
fn m4_with(env: &Env, name: &str, macros: &Path, ending: &str) -> Result<PathBuf, String> {
    let out = sh(
        Command::new("m4").arg(macros).arg(env.src.join(name)),
        "m4 (install it: apt-get install m4)",
    )?;
    let c = env.bin.join(name.replace(".C", ending));
    std::fs::write(&c, out).map_err(|e| e.to_string())?;
    Ok(c)
}

/// Expand an m4-style SPLASH-2 source with the installed c.m4.squall.
fn m4(env: &Env, name: &str) -> Result<PathBuf, String> {
    m4_with(
        env,
        name,
        &env.prefix.join("share/squall/c.m4.squall"),
        ".c",
    )
}
