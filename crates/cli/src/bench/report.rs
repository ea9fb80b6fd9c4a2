//! Shared bench helpers: medians, text tables, the one-line JSON result, and collecting
//! results that node processes print. Every bench (and later ones: fault, lock, barrier,
//! apps) reports through here. Owns presentation only; must not measure anything.
use serde_json::Value;
use squall_launch::{run_job, JobSpec, LineSink, Stream};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Node programs print their results on stdout as one line starting with this tag followed by
/// a JSON object; the bench driver collects them.
pub const RESULT_TAG: &str = "@squall-result ";

/// Median of `values` (mean of the two middle ones for an even count; NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Round to `digits` decimals (for readable JSON).
pub fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// A text table printed with aligned columns.
#[derive(Debug, Default)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(c.len());
            }
        }
        let line = |cells: &[String]| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .take(cols)
                .map(|(i, c)| format!("{:>w$}", c, w = widths[i]))
                .collect();
            parts.join("  ")
        };
        let mut out = String::new();
        if !self.title.is_empty() {
            out.push_str(&self.title);
            out.push('\n');
        }
        out.push_str(&line(&self.headers));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(self.render().as_bytes());
        let _ = out.flush();
    }
}

/// Tag `row` with its transport when the bench covers several (the bench JSON shape).
pub fn tag_transport(row: &mut Value, transports: &[&str], t: &str) {
    if transports.len() > 1 {
        row["transport"] = Value::from(t);
    }
}

/// Name the transport(s) a bench object covers: `"transport"` for one, `"transports"` for
/// several (the bench JSON shape).
pub fn set_transports(obj: &mut Value, transports: &[&str]) {
    match transports {
        [one] => obj["transport"] = Value::from(*one),
        many => obj["transports"] = Value::from(many.to_vec()),
    }
}

/// Print `value` as the single JSON line that ends a `--json` run.
pub fn emit_json(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// Print a node's result line (called inside node programs).
pub fn emit_result(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{RESULT_TAG}{value}");
    let _ = out.flush();
}

/// Collects nodes' result lines; everything else the nodes print goes to stderr, prefixed, so
/// the driver's stdout holds only its table and JSON.
#[derive(Default)]
struct Collect {
    results: Mutex<Vec<(u16, Value)>>,
    bad: Mutex<Vec<String>>,
}

impl LineSink for Collect {
    fn line(&self, rank: u16, stream: Stream, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if stream == Stream::Stdout {
            if let Some(json) = text.strip_prefix(RESULT_TAG) {
                match serde_json::from_str::<Value>(json) {
                    Ok(v) => {
                        if let Ok(mut r) = self.results.lock() {
                            r.push((rank, v));
                        }
                    }
                    Err(e) => {
                        if let Ok(mut b) = self.bad.lock() {
                            b.push(format!("node {rank} printed a bad result line: {e}"));
                        }
                    }
                }
                return;
            }
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "[{rank}] {text}");
    }
}

/// How the benches start mpirun: Open MPI's shared-memory transport without its single-copy
/// mechanism (CMA needs ptrace rights containers usually lack), unless the user chose one in
/// `OMPI_MCA_btl_vader_single_copy_mechanism`.
pub fn mpirun_options() -> squall_launch::MpirunOptions {
    let mut o = squall_launch::MpirunOptions::default();
    if std::env::var_os("OMPI_MCA_btl_vader_single_copy_mechanism").is_none() {
        o.extra_args = ["--mca", "btl_vader_single_copy_mechanism", "none"]
            .map(String::from)
            .to_vec();
    }
    o
}

/// Run `nodes` copies of this executable as `squall __node ARGS...` over `transport` and
/// return each node's result objects in rank order. Fails, naming the node, if the job fails
/// or a result line is malformed.
pub fn run_nodes(
    nodes: usize,
    transport: &str,
    net_faults: Option<&str>,
    args: Vec<String>,
    timeout: Duration,
) -> Result<Vec<(u16, Value)>, String> {
    run_nodes_auth(
        nodes,
        transport,
        net_faults,
        args,
        timeout,
        squall_launch::AuthSetting::Auto,
        &[],
    )
}

/// [`run_nodes`] with extra environment variables for every node.
pub fn run_nodes_env(
    nodes: usize,
    transport: &str,
    args: Vec<String>,
    timeout: Duration,
    env: &[(&str, &str)],
) -> Result<Vec<(u16, Value)>, String> {
    run_nodes_auth(
        nodes,
        transport,
        None,
        args,
        timeout,
        squall_launch::AuthSetting::Auto,
        env,
    )
}

/// [`run_nodes`] with packet authentication set to `auth` (the launcher makes the key).
pub fn run_nodes_auth(
    nodes: usize,
    transport: &str,
    net_faults: Option<&str>,
    args: Vec<String>,
    timeout: Duration,
    auth: squall_launch::AuthSetting,
    env: &[(&str, &str)],
) -> Result<Vec<(u16, Value)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the squall binary: {e}"))?;
    let mut full = vec!["__node".to_string()];
    full.extend(args);
    let mut spec = JobSpec::local(nodes, exe.to_string_lossy().into_owned(), full);
    spec.transport = transport.to_string();
    spec.net_faults = net_faults.map(str::to_string);
    spec.timeout = Some(timeout);
    spec.auth = auth;
    spec.extra_env
        .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    if transport == "mpi" {
        if !cfg!(feature = "mpi") {
            return Err(
                "this squall was built without the mpi transport; rebuild with `--features mpi`"
                    .into(),
            );
        }
        spec.launcher = squall_launch::LauncherKind::Mpirun(mpirun_options());
    }
    let collect = Arc::new(Collect::default());
    let sink: Arc<dyn LineSink> = collect.clone();
    let report = run_job(&spec, sink).map_err(|e| e.to_string())?;
    if !report.success() {
        let why = match report.first_failure {
            Some(rank) => report
                .nodes
                .iter()
                .find(|n| n.rank == rank)
                .map(|n| format!("node {rank} {}", n.exit.describe()))
                .unwrap_or_else(|| format!("node {rank} failed")),
            None if report.timed_out => format!("timed out after {} s", timeout.as_secs()),
            None => format!("exit status {}", report.exit_code()),
        };
        return Err(format!("{transport} job failed: {why}"));
    }
    if let Some(msg) = collect.bad.lock().ok().and_then(|b| b.first().cloned()) {
        return Err(msg);
    }
    let mut results = collect
        .results
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    results.sort_by_key(|(rank, _)| *rank);
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new("t", &["size", "rtt_us"]);
        t.row(vec!["8".into(), "12.5".into()]);
        t.row(vec!["65536".into(), "1".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "t");
        assert_eq!(lines[1], " size  rtt_us");
        assert_eq!(lines[2], "    8    12.5");
        assert_eq!(lines[3], "65536       1");
    }
}
