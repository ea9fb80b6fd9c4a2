//! Cases for the sharing profile (`SQUALL_PROFILE=1`, what `squall run --profile` sets): a
//! plain pthreads program falsely shares one calloc'd array and truly shares another under
//! a mutex; the JSON report must name both allocation sites by the file:line of their calls
//! in the C source, classify each, carry the counts, and put the hot mutex first among the
//! locks.
use super::{job_output_env, sh, Cases, Env};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The line of `src` holding `marker` (1-based).
fn line_of(src: &str, marker: &str) -> Result<usize, String> {
    src.lines()
        .position(|l| l.contains(marker))
        .map(|i| i + 1)
        .ok_or_else(|| format!("no line with {marker:?} in profile_sharing.c"))
}

fn site<'a>(doc: &'a Value, at: &str) -> Result<&'a Value, String> {
    doc["sites"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .find(|x| x["site"].as_str().is_some_and(|n| n.contains(at)))
        })
        .ok_or_else(|| format!("no site {at} in the profile: {doc}"))
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// `squall report FILE`, when the `squall` binary was built beside this test (target/<profile>/):
/// the page must exist and hold the three plots and every name in `names`.
fn render_html(file: &Path, names: &[&str]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let Some(squall) = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("squall"))
        .filter(|p| p.exists())
    else {
        println!("  (no squall binary beside the test: HTML not rendered; build squall-cli)");
        return Ok(());
    };
    let html = file.with_extension("html");
    let _ = std::fs::remove_file(&html);
    sh(
        Command::new(&squall)
            .arg("report")
            .arg(file)
            .arg("-o")
            .arg(&html),
        "squall report",
    )?;
    let page = std::fs::read_to_string(&html).map_err(|e| format!("{}: {e}", html.display()))?;
    if page.matches("<svg").count() < 3 {
        return Err(format!("{}: fewer than three plots", html.display()));
    }
    for n in names {
        if !page.contains(n) {
            return Err(format!("{}: no {n}", html.display()));
        }
    }
    Ok(())
}

/// The fields `docs/profile.md` promises the report renderer: the document's header, the
/// sites' schema names (kind, sharing, nodes_involved, heat), the lock's address and wait,
/// the program's barrier episodes, the timeline and the breakdown of every node.
fn schema_fields(doc: &Value, f: &Value, t: &Value, nodes: usize) -> Result<(), String> {
    if num(doc, "version") != 1 || num(doc, "page_size") == 0 || num(doc, "nodes") != nodes as u64 {
        return Err(format!("header: version/page_size/nodes: {doc}"));
    }
    if !doc["program"]
        .as_str()
        .is_some_and(|p| p.contains("profile_sharing"))
        || !doc["elapsed_s"].as_f64().is_some_and(|e| e > 0.0)
    {
        return Err(format!("header: program/elapsed_s: {doc}"));
    }
    let every: Vec<Value> = (0..nodes as u64).map(Value::from).collect();
    for (s, sharing, pages) in [
        (f, "false", "false_shared_pages"),
        (t, "true", "true_shared_pages"),
    ] {
        if s["kind"] != "alloc" || s["sharing"] != sharing || num(s, pages) == 0 {
            return Err(format!("schema: kind/sharing/{pages}: {s}"));
        }
        let involved = s["nodes_involved"].as_array().cloned().unwrap_or_default();
        if !every.iter().all(|n| involved.contains(n)) {
            return Err(format!("schema: nodes_involved is not every node: {s}"));
        }
        let heat = s["heat"].as_array().cloned().unwrap_or_default();
        let nodes_in_heat: Vec<&Value> = heat.iter().map(|h| &h[1]).collect();
        if !every.iter().all(|n| nodes_in_heat.contains(&n)) || heat.iter().any(|h| h[2] == 0) {
            return Err(format!("schema: heat lacks a node or has zeros: {s}"));
        }
    }
    let hot = &doc["locks"][0];
    if !hot["addr"].as_str().is_some_and(|a| a.starts_with("0x"))
        || !hot["wait_s"].as_f64().is_some_and(|w| w > 0.0)
        || num(hot, "remote_acquires") == 0
        || num(hot, "transfers") == 0
    {
        return Err(format!(
            "schema: the hot lock's addr/wait_s/transfers: {hot}"
        ));
    }
    let bar = doc["barriers"]
        .as_array()
        .and_then(|b| b.iter().find(|x| x["name"] == "global bar"))
        .ok_or_else(|| format!("no barrier `global bar`: {}", doc["barriers"]))?;
    if num(bar, "episodes") != 8 || !bar["wait_s"].as_f64().is_some_and(|w| w > 0.0) {
        return Err(format!("global bar: 8 episodes expected: {bar}"));
    }
    for n in 0..nodes as u64 {
        let points = doc["timeline"].as_array().cloned().unwrap_or_default();
        if !points
            .iter()
            .any(|p| p["node"] == n && num(p, "faults") > 0)
        {
            return Err(format!("timeline: no faults of node {n}"));
        }
        let b = doc["breakdown"]
            .as_array()
            .and_then(|b| b.iter().find(|x| x["node"] == n))
            .ok_or_else(|| format!("breakdown: no node {n}"))?;
        if !b["compute_s"].as_f64().is_some_and(|c| c > 0.0) || !b["data_wait_s"].is_f64() {
            return Err(format!("breakdown of node {n}: {b}"));
        }
    }
    Ok(())
}

pub fn add(v: &mut Cases) {
    v.at_2_and_4("pthreads/profile sharing", |env: &Env, nodes| {
        let exe = env.build_test(
            "cc",
            "profile_sharing.c",
            "profile_sharing",
            Some("squall-pthread"),
        )?;
        let src = std::fs::read_to_string(env.src.join("profile_sharing.c"))
            .map_err(|e| e.to_string())?;
        let false_at = format!(
            "profile_sharing.c:{}",
            line_of(&src, "site: false sharing")?
        );
        let true_at = format!(
            "profile_sharing.c:{}",
            line_of(&src, "site: true sharing")?
        );
        let file = env.bin.join(format!("profile-{nodes}.json"));
        let _ = std::fs::remove_file(&file);
        let threads = (2 * nodes).to_string();
        job_output_env(
            &exe,
            &[&threads, "8"],
            nodes,
            "ok profile sharing",
            &[
                ("SQUALL_PROFILE", "1"),
                ("SQUALL_PROFILE_FILE", &file.display().to_string()),
            ],
        )?;
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let f = site(&doc, &false_at)?;
        let t = site(&doc, &true_at)?;
        if f["class"] != "false sharing" || num(f, "false_sharing_pages") == 0 {
            return Err(format!("{false_at} is not false sharing: {f}"));
        }
        if t["class"] != "true sharing" || num(t, "true_sharing_pages") == 0 {
            return Err(format!("{true_at} is not true sharing: {t}"));
        }
        for (s, what) in [(f, &false_at), (t, &true_at)] {
            for key in ["write_faults", "diffs", "diff_bytes", "invalidations", "bouncing_pages"] {
                if num(s, key) == 0 {
                    return Err(format!("{what}: {key} is 0: {s}"));
                }
            }
            if !s["diagnosis"].as_str().is_some_and(|d| d.contains("nodes")) {
                return Err(format!("{what}: the diagnosis names no nodes: {s}"));
            }
        }
        // The 16 pages of the falsely shared array are all false sharing.
        if num(f, "false_sharing_pages") < 8 {
            return Err(format!("{false_at}: too few false sharing pages: {f}"));
        }
        schema_fields(&doc, f, t, nodes)?;
        let first_lock = doc["locks"][0]["name"].as_str().unwrap_or("");
        if first_lock != "global hot" {
            return Err(format!(
                "the lock with the longest wait should be `hot`, the report has {:?}",
                doc["locks"]
            ));
        }
        if num(&doc["locks"][0], "acquires") != 2 * nodes as u64 * 8 {
            return Err(format!("hot: acquisitions: {}", doc["locks"][0]));
        }
        render_html(&file, &[&false_at, &true_at])?;
        println!(
            "  {false_at}: {} false sharing pages; {true_at}: {} true sharing pages; hot waited {} ms",
            num(f, "false_sharing_pages"),
            num(t, "true_sharing_pages"),
            doc["locks"][0]["total_wait_ms"]
        );
        Ok(())
    });
}
