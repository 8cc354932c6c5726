//! `strata tier status` / `strata tier restore`: what the object store holds, and rebuilding
//! an empty data directory from it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use strata::config::BrokerConfig;

#[derive(Subcommand)]
pub(super) enum TierCommand {
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

pub(super) fn run(command: TierCommand) -> ExitCode {
    let (config, overrides) = match &command {
        TierCommand::Status {
            config, overrides, ..
        }
        | TierCommand::Restore { config, overrides } => (config.clone(), overrides.clone()),
    };
    super::run_with_config(config.as_deref(), &overrides, false, |c| tier(c, command))
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
            if config.cluster.is_some() {
                anyhow::bail!(
                    "restore from the bucket is single-node only: in cluster mode the metadata quorum decides which topics exist (see docs/tiering.md, Tiering in cluster mode)"
                );
            }
            let tiering = strata::tiering::Tiering::open(&config.tiering).await?;
            let n = strata::tiering::restore_if_empty(&tiering, &config).await?;
            println!(
                "restored {n} topic(s) into {}",
                config.log_dirs[0].display()
            );
        }
    }
    Ok(())
}
