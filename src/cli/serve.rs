//! `strata serve`: runs a broker until SIGINT or SIGTERM, then shuts it down in order.

use std::path::Path;
use std::process::ExitCode;

use strata::config::BrokerConfig;

pub(super) fn run(config: Option<&Path>, overrides: &[String]) -> ExitCode {
    super::run_with_config(config, overrides, true, serve)
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
