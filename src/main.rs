//! The `strata` command: `serve` runs a broker; `config check` validates a config file;
//! `tier status` / `tier restore` inspect and restore from the object store.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata::config::BrokerConfig;

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "A Kafka-compatible, tiered-storage log service"
)]
struct Cli {
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
        command: ConfigCommand,
    },
    /// Tiered storage: what the bucket holds, and restoring a broker from it.
    Tier {
        #[command(subcommand)]
        command: TierCommand,
    },
}

#[derive(Subcommand)]
enum TierCommand {
    /// Print the topics and partitions kept in the object store (from its catalog and
    /// manifests) with their remote offsets and sizes.
    Status {
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
    },
    /// Rebuild the topics of an empty data directory from the object store alone (what
    /// `serve` also does when it starts on an empty data directory).
    Restore {
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file (plus STRATA_* variables and overrides) and print the result.
    Check {
        file: PathBuf,
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,foyer=warn,foyer_common=warn,foyer_memory=warn,foyer_storage=warn",
        )
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check { file, overrides },
        } => match BrokerConfig::load(Some(&file), &overrides) {
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
        },
        Command::Tier { command } => {
            let (config, overrides) = match &command {
                TierCommand::Status {
                    config, overrides, ..
                }
                | TierCommand::Restore { config, overrides } => (config.clone(), overrides.clone()),
            };
            let config = match BrokerConfig::load(config.as_deref(), &overrides) {
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
            match rt.block_on(tier(config, command)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve { config, overrides } => {
            let config = match BrokerConfig::load(config.as_deref(), &overrides) {
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
            match rt.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn tier(config: BrokerConfig, command: TierCommand) -> anyhow::Result<()> {
    match command {
        TierCommand::Status { topic, .. } => {
            print!(
                "{}",
                strata::tiering::status_report(&config, topic.as_deref()).await?
            );
        }
        TierCommand::Restore { .. } => {
            if !strata::broker::is_fresh_data_dir(&config) {
                anyhow::bail!(
                    "{} already holds a broker's data; restore only fills an empty data directory",
                    config.log_dirs[0].display()
                );
            }
            let tiering = strata::tiering::Tiering::open(&config.tiering).await?;
            let n = strata::tiering::restore_if_empty(&tiering, &config).await?;
            tiering.reader.close().await;
            println!(
                "restored {n} topic(s) into {}",
                config.log_dirs[0].display()
            );
        }
    }
    Ok(())
}

async fn serve(config: BrokerConfig) -> anyhow::Result<()> {
    let running = strata::runtime::start(config).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    running.shutdown().await
}
