//! The `squall` command: `squall run` launches jobs, `squall bench` runs benchmarks,
//! `squall chaos` injects faults into app jobs, `squall demo` runs the quick-start demo,
//! `squall doctor` checks the machine, `squall env` prints the environment variables and
//! `squall run` options.
//!
//! Owns argument parsing and the node programs the benches and tests re-execute (hidden
//! `squall __node ...`); must not touch protocol internals.
#![forbid(unsafe_code)]

mod bench;
mod chaos;
mod demo;
mod doctor;
mod envtable;
mod node;
mod report;
mod run;
mod settings;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "squall",
    version,
    about = "Squall: a software distributed shared memory system",
    long_about = "Squall runs one program as N cooperating node processes that share memory \
                  and talk over a message backbone (tcp or reliable udp)."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start N node processes of PROGRAM and supervise them until they all end.
    Run(run::RunArgs),
    /// Run a benchmark: the backbone, the shared-memory operations, the applications.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Faults at scale: kill, stop or cut off a node of app jobs at random moments and check
    /// every job ends with a message naming the node and a non-zero exit (no hangs).
    Chaos(chaos::ChaosArgs),
    /// Run the quick-start demo on N local nodes (default 4).
    Demo(demo::DemoArgs),
    /// Check this machine (and the hosts given) before a job: userfaultfd, memory and address
    /// space for the heap, vm.max_map_count, ports, ssh, the C tools, the SQUALL_* settings.
    Doctor(doctor::DoctorArgs),
    /// Print the environment variables Squall reads and the `squall run` options, with their
    /// defaults and effects.
    Env {
        /// As Markdown tables (what docs/env.md holds; the README holds the variables).
        #[arg(long)]
        markdown: bool,
    },
    /// Render a sharing profile (`squall run --profile`) as one self-contained HTML page.
    Report(report::ReportArgs),
    /// A node program run by the launcher on behalf of `bench`, `demo` and the tests.
    #[command(name = "__node", hide = true, subcommand)]
    Node(node::NodeCmd),
}

fn main() {
    let cmd = Cli::command().mut_subcommand("run", |c| c.after_help(run::after_help()));
    let matches = cmd.get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let code = match cli.command {
        Cmd::Run(args) => run::main(args),
        Cmd::Bench(b) => bench::main(b),
        Cmd::Chaos(args) => chaos::main(args),
        Cmd::Demo(args) => demo::main(args),
        Cmd::Doctor(args) => doctor::main(args),
        Cmd::Env { markdown } => {
            if markdown {
                print!("{}\n{}", envtable::markdown(), envtable::options_markdown());
            } else {
                print!("{}\n{}", envtable::table(), envtable::options_table());
            }
            0
        }
        Cmd::Report(args) => report::main(args),
        Cmd::Node(n) => node::main(n),
    };
    std::process::exit(code);
}
