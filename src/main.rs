//! The `strata` command: `serve` runs a broker; `config check` validates a config file;
//! `tier status` / `tier restore` inspect and restore from the object store; `cleaner status`
//! prints the log cleaner's state from a running broker's admin `/metrics`.

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
    /// Log compaction: the log cleaner of a running broker.
    Cleaner {
        #[command(subcommand)]
        command: CleanerCommand,
    },
}

#[derive(Subcommand)]
enum CleanerCommand {
    /// Print the dirty ratio of every compacted partition and the cleaner's totals (passes,
    /// bytes cleaned, last pass duration, errors), read from the broker's admin /metrics.
    Status {
        /// The broker's admin listener (strata.admin.listener), HOST:PORT.
        #[arg(long, default_value = "127.0.0.1:9644")]
        admin: String,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
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
        Command::Cleaner {
            command: CleanerCommand::Status { admin, topic },
        } => match cleaner_status(&admin, topic.as_deref()) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e:#}");
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

/// `strata cleaner status`: GET /metrics from the admin listener and render the cleaner's part.
fn cleaner_status(admin: &str, topic: Option<&str>) -> anyhow::Result<String> {
    let body = http_get(admin, "/metrics")?;
    Ok(cleaner_report(&CleanerMetrics::parse(&body), topic))
}

/// A plain HTTP/1.1 GET (the admin listener answers one request per connection and closes it).
fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::time::Duration;

    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let timeout = Duration::from_secs(10);
    let socket = addr
        .to_socket_addrs()
        .with_context(|| format!("bad admin address {addr:?} (want HOST:PORT)"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&socket, timeout)
        .with_context(|| format!("cannot connect to the admin listener at {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the reply of {addr}{path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("{addr}{path}: not an HTTP reply"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        anyhow::bail!("{addr}{path}: {status}");
    }
    Ok(body.to_string())
}

/// The log cleaner's series of a Prometheus text exposition.
#[derive(Debug, Default, PartialEq)]
struct CleanerMetrics {
    passes: Option<f64>,
    bytes_cleaned: Option<f64>,
    bytes_written: Option<f64>,
    records_removed: Option<f64>,
    errors: Option<f64>,
    last_pass_seconds: Option<f64>,
    /// (topic, partition, dirty ratio, local bytes, local segments), by topic and partition.
    partitions: Vec<(String, i32, f64, Option<f64>, Option<f64>)>,
}

impl CleanerMetrics {
    fn parse(text: &str) -> CleanerMetrics {
        use std::collections::BTreeMap;
        let mut m = CleanerMetrics::default();
        let mut ratios: BTreeMap<(String, i32), f64> = BTreeMap::new();
        let mut sizes: BTreeMap<(String, i32), f64> = BTreeMap::new();
        let mut segments: BTreeMap<(String, i32), f64> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series.trim(), ""),
            };
            let partition_key = || {
                let mut topic = None;
                let mut partition = None;
                for label in labels.split(',') {
                    match label.split_once('=') {
                        Some(("topic", v)) => topic = Some(v.trim_matches('"').to_string()),
                        Some(("partition", v)) => partition = v.trim_matches('"').parse().ok(),
                        _ => {}
                    }
                }
                topic.zip(partition)
            };
            match name {
                "strata_log_cleaner_passes_total" => m.passes = Some(value),
                "strata_log_cleaner_bytes_cleaned_total" => m.bytes_cleaned = Some(value),
                "strata_log_cleaner_bytes_written_total" => m.bytes_written = Some(value),
                "strata_log_cleaner_records_removed_total" => m.records_removed = Some(value),
                "strata_log_cleaner_errors_total" => m.errors = Some(value),
                "strata_log_cleaner_last_pass_duration_seconds" => {
                    m.last_pass_seconds = Some(value)
                }
                "strata_partition_cleaner_dirty_ratio" => {
                    if let Some(key) = partition_key() {
                        ratios.insert(key, value);
                    }
                }
                "strata_partition_size_bytes" => {
                    if let Some(key) = partition_key() {
                        sizes.insert(key, value);
                    }
                }
                "strata_partition_segments" => {
                    if let Some(key) = partition_key() {
                        segments.insert(key, value);
                    }
                }
                _ => {}
            }
        }
        m.partitions = ratios
            .into_iter()
            .map(|(key, ratio)| {
                let size = sizes.get(&key).copied();
                let segs = segments.get(&key).copied();
                (key.0, key.1, ratio, size, segs)
            })
            .collect();
        m
    }
}

/// The table `strata cleaner status` prints.
fn cleaner_report(m: &CleanerMetrics, topic: Option<&str>) -> String {
    use std::fmt::Write;
    let rows: Vec<_> = m
        .partitions
        .iter()
        .filter(|p| topic.is_none_or(|t| p.0 == t))
        .collect();
    let width = rows
        .iter()
        .map(|p| p.0.len())
        .chain(["TOPIC".len()])
        .max()
        .unwrap_or(5);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:>9}  {:>11}  {:>12}  {:>8}",
        "TOPIC", "PARTITION", "DIRTY_RATIO", "SIZE_BYTES", "SEGMENTS"
    );
    for (t, p, ratio, size, segs) in &rows {
        let opt = |v: &Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let _ = writeln!(
            out,
            "{t:<width$}  {p:>9}  {ratio:>11.4}  {:>12}  {:>8}",
            opt(size),
            opt(segs)
        );
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no compacted partitions)");
    }
    let count = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let mib = |v: Option<f64>| {
        v.map_or("-".to_string(), |v| {
            format!("{v:.0} ({:.1} MiB)", v / (1024.0 * 1024.0))
        })
    };
    let _ = writeln!(out);
    let _ = writeln!(out, "passes:             {}", count(m.passes));
    let _ = writeln!(out, "bytes cleaned:      {}", mib(m.bytes_cleaned));
    let _ = writeln!(out, "bytes written:      {}", mib(m.bytes_written));
    let _ = writeln!(out, "records removed:    {}", count(m.records_removed));
    let _ = writeln!(
        out,
        "last pass duration: {}",
        m.last_pass_seconds
            .map_or("-".to_string(), |s| format!("{s:.3} s"))
    );
    let _ = writeln!(out, "errors:             {}", count(m.errors));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# HELP strata_partition_size_bytes Bytes in local segments.
# TYPE strata_partition_size_bytes gauge
strata_partition_size_bytes{topic=\"plain\",partition=\"0\"} 10
strata_partition_size_bytes{topic=\"keyed\",partition=\"1\"} 2048
strata_partition_segments{topic=\"keyed\",partition=\"1\"} 3
strata_log_cleaner_passes_total 4
strata_log_cleaner_bytes_cleaned_total 1048576
strata_log_cleaner_bytes_written_total 4096
strata_log_cleaner_records_removed_total 99
strata_log_cleaner_errors_total 0
strata_log_cleaner_last_pass_duration_seconds 0.25
strata_partition_cleaner_dirty_ratio{topic=\"keyed\",partition=\"1\"} 0.5
strata_partition_cleaner_dirty_ratio{topic=\"keyed\",partition=\"0\"} 0
";

    #[test]
    fn cleaner_status_lists_only_compacted_partitions_with_their_dirty_ratio() {
        let m = CleanerMetrics::parse(METRICS);
        assert_eq!(m.passes, Some(4.0));
        assert_eq!(m.last_pass_seconds, Some(0.25));
        assert_eq!(
            m.partitions,
            vec![
                ("keyed".to_string(), 0, 0.0, None, None),
                ("keyed".to_string(), 1, 0.5, Some(2048.0), Some(3.0)),
            ]
        );
        let report = cleaner_report(&m, None);
        assert!(report.contains("keyed          1       0.5000          2048         3"));
        assert!(!report.contains("plain"));
        assert!(report.contains("bytes cleaned:      1048576 (1.0 MiB)"));
        assert!(cleaner_report(&m, Some("other")).contains("(no compacted partitions)"));
    }
}
