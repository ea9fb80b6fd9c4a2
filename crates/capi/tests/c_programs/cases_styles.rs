//! Cases for the seed applications written in other sharing styles (issue 23 item 4):
//! every `apps/<app>/<app>_crl.c` (CRL regions, built with `pkg-config squall-crl`) and
//! `apps/<app>/<app>_splitc.c` (Split-C global pointers, `pkg-config squall-shmem`), built as
//! `make -C apps SQUALL=1` builds them (`-DAPP_STYLE`), run as SPMD jobs at size `tiny` on 2 and
//! 4 nodes over tcp and on 2 nodes over udp with loss, duplication and reordering, until each
//! verifies its answer against the sequential computation it does itself.
use super::{job_output_timeout, sh, Cases, Env};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The faults injected on the udp run: datagrams lost, duplicated and reordered.
const LOSSY_UDP: &str = "loss=0.03,dup=0.02,reorder=0.05,seed=7";

/// Every (app, style, package) with a source file, sorted.
fn styled_apps(apps_dir: &std::path::Path) -> Vec<(String, &'static str, &'static str)> {
    let mut out = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(apps_dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for app in names {
        for (style, pkg) in [("crl", "squall-crl"), ("splitc", "squall-shmem")] {
            if apps_dir
                .join(&app)
                .join(format!("{app}_{style}.c"))
                .is_file()
            {
                out.push((app.clone(), style, pkg));
            }
        }
    }
    out
}

pub fn add(v: &mut Cases) {
    let apps_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../apps");
    for (app, style, pkg) in styled_apps(&apps_dir) {
        let dir = apps_dir.clone();
        v.add(
            format!("styles/{app}_{style}/2,4 nodes/tcp+udp-lossy"),
            move |env: &Env| {
                let exe = env.bin.join(format!("{app}_{style}"));
                let mut cmd = Command::new("cc");
                cmd.args([
                    "-std=gnu11",
                    "-O2",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pthread",
                ])
                .arg(format!("-DAPP_STYLE=\"{style}\""))
                .arg("-I")
                .arg(dir.join("common"))
                .arg("-I")
                .arg(dir.join(&app))
                .arg("-o")
                .arg(&exe)
                .arg(dir.join(&app).join(format!("{app}_{style}.c")))
                .args(env.pkg_config(&["--cflags", "--libs", pkg])?)
                .arg("-lm");
                sh(&mut cmd, &format!("compiling apps/{app}/{app}_{style}.c"))?;
                let runs: [(usize, &[(&str, &str)]); 3] = [
                    (2, &[]),
                    (4, &[]),
                    (
                        2,
                        &[
                            ("SQUALL_TRANSPORT", "udp"),
                            ("SQUALL_NET_FAULTS", LOSSY_UDP),
                        ],
                    ),
                ];
                for (nodes, vars) in runs {
                    let t = Instant::now();
                    let out = job_output_timeout(
                        &exe,
                        &["-s", "tiny"],
                        nodes,
                        "verified=1",
                        vars,
                        Duration::from_secs(120),
                    )
                    .map_err(|e| format!("{nodes} nodes {vars:?}: {e}"))?;
                    let want = format!("mode={style} threads={nodes} ");
                    if !out.iter().any(|l| l.contains(&want)) {
                        return Err(format!("no RESULT line with `{want}`: {out:?}"));
                    }
                    println!(
                        "    {app} {style} tiny {nodes} nodes {vars:?}: verified, job {:.2}s",
                        t.elapsed().as_secs_f64()
                    );
                }
                Ok(())
            },
        );
    }
}
