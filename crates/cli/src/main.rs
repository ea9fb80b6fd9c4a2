//! The `squall` command: `squall run` launches jobs, `squall bench` runs benchmarks.
fn main() {
    eprintln!("squall: no subcommand yet");
    std::process::exit(2);
}
