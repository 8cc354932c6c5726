//! `strata scram add`: writes a user's SCRAM credential into a data directory before the
//! broker starts (as `kafka-storage format --add-scram`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use strata::config::BrokerConfig;

#[derive(Subcommand)]
pub(super) enum ScramCommand {
    /// Add or replace a user's SCRAM credential (the broker must not be running).
    Add {
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        #[arg(long)]
        user: String,
        #[arg(long)]
        password: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512.
        #[arg(long, default_value = "SCRAM-SHA-256")]
        mechanism: String,
        #[arg(long, default_value_t = 4096)]
        iterations: i32,
    },
}

pub(super) fn run(command: ScramCommand) -> ExitCode {
    let ScramCommand::Add {
        config,
        overrides,
        user,
        password,
        mechanism,
        iterations,
    } = command;
    scram_add(config, overrides, &user, &password, &mechanism, iterations)
}

fn scram_add(
    config: Option<PathBuf>,
    overrides: Vec<String>,
    user: &str,
    password: &str,
    mechanism: &str,
    iterations: i32,
) -> ExitCode {
    let config = match BrokerConfig::load(config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(m) = strata::security::scram::Mechanism::parse(mechanism) else {
        eprintln!("unknown mechanism {mechanism}: use SCRAM-SHA-256 or SCRAM-SHA-512");
        return ExitCode::from(2);
    };
    if user.is_empty() || !(4096..=16384).contains(&iterations) {
        eprintln!("the user must not be empty and iterations must be in 4096..=16384");
        return ExitCode::from(2);
    }
    let credential = strata::security::scram::credential_for_password(m, password, iterations);
    match strata::broker::add_scram_credential_offline(&config, user, m, credential) {
        Ok(()) => {
            println!(
                "added {} credential for {user} in {}",
                m.name(),
                config.log_dirs[0].display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot write the credential: {e}");
            ExitCode::FAILURE
        }
    }
}
