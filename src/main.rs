//! The `strata` command: `serve` runs a broker; `config check` validates a config file;
//! `tier status` / `tier restore` inspect and restore from the object store; `cleaner status`
//! prints the log cleaner's state from a running broker's admin `/metrics`; `export` writes
//! a topic's records as Parquet files for bulk loads. The subcommands live in [`cli`].

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            // openraft::replication logs every failed RPC to an unreachable voter at ERROR
            // (twice a second while a node is down); the controller logs what needs a person.
            "info,foyer_common=warn,foyer_memory=warn,\
             openraft=warn,openraft::replication=off",
        )
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        // No colour codes in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_tracing();
    cli.run()
}
