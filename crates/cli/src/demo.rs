//! `squall demo`: the quick-start demo. Runs `squall __node demo` on N local nodes through the
//! launcher, output prefixed by rank. Owns only this entry point.
use crate::run::Transport;
use clap::Args;
use squall_launch::{run_job, ForwardSink, JobSpec};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of nodes.
    #[arg(short = 'n', long = "nodes", default_value_t = 4)]
    pub nodes: usize,
    /// Backend the nodes talk over.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: Transport,
    /// Run the backbone demo (token ring and message flood) instead of the shared-memory one.
    #[arg(long)]
    pub backbone: bool,
    /// Print the statistics table at the end (shared-memory demo).
    #[arg(long)]
    pub stats: bool,
}

pub fn main(a: DemoArgs) -> i32 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Err(bad) = crate::run::check_nodes(
        a.nodes,
        true,
        crate::settings::soft_limit(&limits, "Max processes"),
    ) {
        return crate::settings::report("demo", &[bad]);
    }
    let bad = crate::run::check_environment(a.nodes, a.transport.name(), true);
    if !bad.is_empty() {
        return crate::settings::report("demo", &bad);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("squall demo: cannot find the squall binary: {e}");
            return 1;
        }
    };
    let program = if a.backbone { "demo" } else { "heat" };
    let mut spec = JobSpec::local(
        a.nodes,
        exe.to_string_lossy().into_owned(),
        vec!["__node".into(), program.into()],
    );
    spec.transport = a.transport.name().to_string();
    spec.timeout = Some(Duration::from_secs(120));
    spec.stats = a.stats;
    if a.backbone {
        println!(
            "squall demo: {} nodes over {}: a token around the ring, then every node floods the next",
            a.nodes, spec.transport
        );
    } else {
        println!(
            "squall demo: {} nodes over {}: heat diffusion on a grid in shared memory (hlrc), \
             each node updating its band of rows; checked against the sequential program",
            a.nodes, spec.transport
        );
    }
    match run_job(&spec, Arc::new(ForwardSink { prefix: true })) {
        Ok(report) => report.exit_code(),
        Err(e) => {
            eprintln!("squall demo: {e}");
            2
        }
    }
}
