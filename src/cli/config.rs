//! `strata config check`: validates a config file (plus STRATA_* variables and overrides) and
//! prints the settings that locate the broker.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use strata::config::BrokerConfig;

#[derive(Subcommand)]
pub(super) enum ConfigCommand {
    /// Validate a config file (plus STRATA_* variables and overrides) and print the result.
    Check {
        file: PathBuf,
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
}

pub(super) fn run(command: ConfigCommand) -> ExitCode {
    let ConfigCommand::Check { file, overrides } = command;
    match BrokerConfig::load(Some(&file), &overrides) {
        Ok(c) => {
            println!("{}: OK", file.display());
            println!(
                "node.id={} listener={} advertised={}:{} log.dirs={}",
                c.node_id,
                c.listener.bind,
                c.listener.advertised_host,
                c.listener.advertised_port,
                c.log_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            ExitCode::FAILURE
        }
    }
}
