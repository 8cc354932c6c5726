//! The `strata` command line: the clap definitions of every subcommand and their dispatch.
//! Each subcommand lives in its own file with its arguments and its `run`:
//! [`serve`], [`config`] (`config check`), [`scram`] (`scram add`), [`tier`] (`tier status`,
//! `tier restore`), [`cleaner`] (`cleaner status`) and [`export`].
//!
//! Exit statuses: 0 on success, 1 when the command failed, 2 when the broker's configuration
//! does not load (and for `scram add`'s bad arguments, as for clap's usage errors);
//! `config check` reports an invalid file with 1.

mod cleaner;
mod config;
mod export;
mod scram;
mod serve;
mod tier;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata::config::BrokerConfig;

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "A Kafka-compatible, tiered-storage log service"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker. With no options: 127.0.0.1:9092, data in ./strata-data, admin HTTP on
    /// 127.0.0.1:9644.
    Serve {
        /// A Kafka server.properties or a TOML file, with Kafka's setting names.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Override one setting: --override log.retention.ms=3600000 (repeatable). Wins over
        /// the file and STRATA_* environment variables.
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Inspect configuration.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// SCRAM credentials in a data directory, before the broker starts (as
    /// `kafka-storage format --add-scram`); a running broker takes them with
    /// AlterUserScramCredentials instead.
    Scram {
        #[command(subcommand)]
        command: scram::ScramCommand,
    },
    /// Tiered storage: what the bucket holds, and restoring a broker from it.
    Tier {
        #[command(subcommand)]
        command: tier::TierCommand,
    },
    /// Log compaction: the log cleaner of a running broker.
    Cleaner {
        #[command(subcommand)]
        command: cleaner::CleanerCommand,
    },
    /// Export a topic's records as Parquet (Hive-style topic=T/partition=P/ directories, one
    /// file per offset range) from its remote segments and sealed local segments. Resumes
    /// at each partition's _checkpoint.json, so a re-run never duplicates or skips records.
    Export(export::ExportArgs),
}

impl Cli {
    /// Runs the chosen subcommand; its exit status.
    pub fn run(self) -> ExitCode {
        match self.command {
            Command::Serve { config, overrides } => serve::run(config.as_deref(), &overrides),
            Command::Config { command } => config::run(command),
            Command::Scram { command } => scram::run(command),
            Command::Tier { command } => tier::run(command),
            Command::Cleaner { command } => cleaner::run(command),
            Command::Export(args) => export::run(args),
        }
    }
}

/// Loads the configuration, then runs `job` on a multi-threaded runtime. A bad configuration
/// exits with 2, a failed job with 1 (logged through tracing when `log` is set, as the broker
/// does; printed otherwise).
fn run_with_config<F, Fut>(
    config: Option<&Path>,
    overrides: &[String],
    log: bool,
    job: F,
) -> ExitCode
where
    F: FnOnce(BrokerConfig) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let config = match BrokerConfig::load(config, overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(job(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if log => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
