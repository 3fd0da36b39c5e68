//! `tailctl`: the operator CLI. Each subcommand lives in its own module and owns
//! its clap arguments; this file only dispatches.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod maps;
mod sim;
mod thresholds;
mod top;
mod vm;

#[derive(Parser)]
#[command(name = "tailctl", version, about = "tailctl operator CLI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute a tail-control threshold table.
    Thresholds(thresholds::Args),
    /// Discrete-event simulation of the scheduling policies.
    Sim(sim::Args),
    /// Provision and run commands in a sched_ext VM (or directly on a sched_ext host).
    Vm(vm::Args),
    /// Inspect scx_tailctl's pinned BPF maps, bpftool-style, with our structs decoded.
    Maps(maps::Args),
    /// Live terminal view of services, their requests and the CPUs.
    Top(top::Args),
}

fn main() {
    // One line per cause, no backtrace: these errors are for operators.
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Thresholds(args) => thresholds::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Vm(args) => vm::run(args),
        Command::Maps(args) => maps::run(args),
        Command::Top(args) => top::run(args),
    }
}
