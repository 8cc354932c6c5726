//! The `strata` command: `serve` runs a broker; `config check` validates a config file;
//! `tier status` / `tier restore` inspect and restore from the object store; `cleaner status`
//! prints the log cleaner's state from a running broker's admin `/metrics`; `export` writes
//! a topic's records as Parquet files for bulk loads.

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
    /// SCRAM credentials in a data directory, before the broker starts (as
    /// `kafka-storage format --add-scram`); a running broker takes them with
    /// AlterUserScramCredentials instead.
    Scram {
        #[command(subcommand)]
        command: ScramCommand,
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
    /// Export a topic's records as Parquet (Hive-style topic=T/partition=P/ directories, one
    /// file per offset range) from its remote segments and sealed local segments. Resumes
    /// at each partition's _checkpoint.json, so a re-run never duplicates or skips records.
    Export(ExportArgs),
}

#[derive(clap::Args)]
struct ExportArgs {
    #[arg(long)]
    topic: String,
    /// Partitions to export, e.g. 0,1,5 (default: all).
    #[arg(long, value_delimiter = ',')]
    partitions: Vec<i32>,
    /// First offset to export (default: the log start).
    #[arg(long, conflicts_with = "from_time")]
    from_offset: Option<i64>,
    /// Start at each partition's first record with a timestamp at or after this (ISO 8601
    /// like 2026-01-02T03:04:05Z, a date, or epoch ms).
    #[arg(long)]
    from_time: Option<String>,
    /// Stop before this offset (exclusive; default: the end of the sealed segments).
    #[arg(long, conflicts_with = "to_time")]
    to_offset: Option<i64>,
    /// Stop at each partition's first record with a timestamp after this.
    #[arg(long)]
    to_time: Option<String>,
    /// A directory, or s3://bucket/prefix (reached with the strata.remote.store.* endpoint,
    /// region and credentials of the configuration).
    #[arg(long)]
    out: String,
    /// The broker's configuration, to find log.dirs and the remote store.
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[arg(long = "override", short = 'o', value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Partitions exported at once (default: the number of cores).
    #[arg(long)]
    parallelism: Option<usize>,
    /// Close a file at the next batch boundary past this many bytes (a file never spans
    /// segments either).
    #[arg(long, default_value_t = 256 << 20)]
    file_bytes: usize,
    /// Row group size target in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    row_group_bytes: usize,
    /// zstd level of the Parquet pages (1-22).
    #[arg(long, default_value_t = 1)]
    zstd_level: i32,
    /// Also decode JSON values into typed `value_<name>` columns declared in this file, e.g.
    /// {"fields":[{"name":"id","type":"long"},{"name":"tags","type":"string","nullable":true}]}
    /// (types: long, int, double, string, boolean, timestamp_ms). The raw `value` column is
    /// kept; values that are not JSON objects or do not fit get nulls and are counted.
    #[arg(long, value_name = "FILE")]
    value_schema: Option<PathBuf>,
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
            // openraft::replication logs every failed RPC to an unreachable voter at ERROR
            // (twice a second while a node is down); the controller logs what needs a person.
            "info,foyer=warn,foyer_common=warn,foyer_memory=warn,foyer_storage=warn,\
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
        Command::Export(args) => {
            let (config, overrides) = (args.config.clone(), args.overrides.clone());
            run_with_config(config.as_deref(), &overrides, false, |c| export(c, args))
        }
        Command::Scram {
            command:
                ScramCommand::Add {
                    config,
                    overrides,
                    user,
                    password,
                    mechanism,
                    iterations,
                },
        } => scram_add(config, overrides, &user, &password, &mechanism, iterations),
        Command::Tier { command } => {
            let (config, overrides) = match &command {
                TierCommand::Status {
                    config, overrides, ..
                }
                | TierCommand::Restore { config, overrides } => (config.clone(), overrides.clone()),
            };
            run_with_config(config.as_deref(), &overrides, false, |c| tier(c, command))
        }
        Command::Serve { config, overrides } => {
            run_with_config(config.as_deref(), &overrides, true, serve)
        }
    }
}

/// Loads the configuration, then runs `job` on a multi-threaded runtime. A bad configuration
/// exits with 2, a failed job with 1 (logged through tracing when `log` is set, as the broker
/// does; printed otherwise).
fn run_with_config<F, Fut>(
    config: Option<&std::path::Path>,
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

#[derive(Subcommand)]
enum ScramCommand {
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
    let Some(m) = strata::auth::scram::Mechanism::parse(mechanism) else {
        eprintln!("unknown mechanism {mechanism}: use SCRAM-SHA-256 or SCRAM-SHA-512");
        return ExitCode::from(2);
    };
    if user.is_empty() || !(4096..=16384).contains(&iterations) {
        eprintln!("the user must not be empty and iterations must be in 4096..=16384");
        return ExitCode::from(2);
    }
    let credential = strata::auth::scram::credential_for_password(m, password, iterations);
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
            tiering.reader.close().await;
            println!(
                "restored {n} topic(s) into {}",
                config.log_dirs[0].display()
            );
        }
    }
    Ok(())
}

/// `strata export`: plans every partition (remote manifest + sealed local segments), exports
/// them `parallelism` at a time, prints progress to stderr and a summary to stdout.
async fn export(config: BrokerConfig, args: ExportArgs) -> anyhow::Result<()> {
    use std::collections::BTreeSet;
    use std::io::IsTerminal;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::Context;
    use strata_tiering::export::{self, ExportOptions, ExportRange, PlanInput, Progress, Target};
    use strata_tiering::{PartitionId, RemoteStore};

    let time = |t: &Option<String>| -> anyhow::Result<Option<i64>> {
        t.as_deref()
            .map(export::parse_time)
            .transpose()
            .map_err(anyhow::Error::msg)
    };
    let range = ExportRange {
        from_offset: args.from_offset,
        to_offset: args.to_offset,
        from_time: time(&args.from_time)?,
        to_time: time(&args.to_time)?,
    };
    let topic = args.topic.as_str();
    // The bucket, when this topic has anything in it.
    let mut remote = None;
    let mut partitions: BTreeSet<i32> = BTreeSet::new();
    // A broker without tiering still has the default file:// store; its absence is no error.
    match RemoteStore::open(&config.tiering.store) {
        Ok(store) => {
            let store = Arc::new(store);
            match strata_tiering::catalog::load(&store).await {
                Ok(Some((cat, _))) => {
                    if let Some(t) = cat.topics.get(topic) {
                        partitions.extend(0..t.partitions);
                        remote = Some((store, t.topic_id));
                    }
                }
                Ok(None) => {}
                Err(e) if config.tiering.enabled => {
                    return Err(e).with_context(|| format!("reading the catalog of {store}"))
                }
                Err(_) => {}
            }
        }
        Err(e) if config.tiering.enabled => return Err(e.into()),
        Err(_) => {}
    }
    // Local partition directories: <log.dir>/<topic>-<partition>.
    let mut local: std::collections::HashMap<i32, PathBuf> = Default::default();
    for dir in &config.log_dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(p) = name
                .strip_prefix(topic)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|p| p.parse::<i32>().ok())
            {
                partitions.insert(p);
                local.insert(p, e.path());
            }
        }
    }
    if !args.partitions.is_empty() {
        for p in &args.partitions {
            if !partitions.contains(p) {
                anyhow::bail!("topic {topic} has no partition {p} here or in the bucket");
            }
        }
        partitions = args.partitions.iter().copied().collect();
    }
    if partitions.is_empty() {
        anyhow::bail!(
            "topic {topic} is neither in the bucket's catalog nor in log.dirs ({})",
            config
                .log_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    // Read the value schema before anything is written.
    let value_schema = match &args.value_schema {
        Some(path) => {
            let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let schema = export::ValueSchema::from_json(&raw)
                .with_context(|| format!("value schema {}", path.display()))?;
            Some(Arc::new(schema))
        }
        None => None,
    };
    let target = Arc::new(Target::open(&args.out, &config.tiering.store)?);
    let mut options = ExportOptions {
        file_bytes: args.file_bytes.max(1),
        ..Default::default()
    };
    options.convert.row_group_bytes = args.row_group_bytes.max(1);
    options.convert.zstd_level = args.zstd_level;
    options.convert.value_schema = value_schema;
    // Fail point for the crash tests: a pause between a file landing and its checkpoint.
    options.pause_before_checkpoint = std::env::var("STRATA_EXPORT_FAILPOINT_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    let parallelism = args
        .parallelism
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let progress = Arc::new(Progress::default());
    let cancel = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    eprintln!(
        "exporting {topic} partitions {:?} to {target} ({parallelism} at a time)",
        partitions
    );

    let limit = Arc::new(tokio::sync::Semaphore::new(parallelism));
    let mut jobs = tokio::task::JoinSet::new();
    for p in partitions {
        let remote = remote
            .as_ref()
            .map(|(s, id): &(Arc<RemoteStore>, uuid::Uuid)| {
                (
                    s.clone(),
                    PartitionId {
                        topic: topic.to_string(),
                        topic_id: *id,
                        partition: p,
                    },
                )
            });
        let local_dir = local.get(&p).cloned();
        let high_watermark = local_dir
            .as_ref()
            .and_then(|d| export::read_high_watermark(d.parent()?, topic, p));
        let (target, progress, cancel, limit, options) = (
            target.clone(),
            progress.clone(),
            cancel.clone(),
            limit.clone(),
            options.clone(),
        );
        let topic = topic.to_string();
        jobs.spawn(async move {
            let _permit = limit.acquire_owned().await;
            let mut attempt = 0;
            loop {
                attempt += 1;
                let (checkpoint, _) = target.read_checkpoint(&topic, p).await?;
                let from = checkpoint.map_or(range.from_offset.unwrap_or(0), |c| c.next_offset);
                let plan = export::plan_partition(PlanInput {
                    topic: &topic,
                    partition: p,
                    remote: remote.clone(),
                    local_dir: local_dir.clone(),
                    high_watermark,
                    from,
                })
                .await?;
                match export::export_partition(
                    Arc::new(plan),
                    target.clone(),
                    range,
                    options.clone(),
                    progress.clone(),
                    cancel.clone(),
                )
                .await
                {
                    // Local retention deleted a segment after its upload: plan again.
                    Err(e) if e.needs_new_plan() && attempt < 5 => continue,
                    other => return other,
                }
            }
        });
    }

    let tty = std::io::stderr().is_terminal();
    let report = |final_line: bool| {
        let records = progress.records.load(Ordering::Relaxed);
        let bytes_in = progress.bytes_in.load(Ordering::Relaxed);
        let planned = progress.bytes_planned.load(Ordering::Relaxed).max(bytes_in);
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        let rate = bytes_in as f64 / secs;
        let eta = if rate > 0.0 {
            format!("{:.0}s", (planned - bytes_in) as f64 / rate)
        } else {
            "-".into()
        };
        let line = format!(
            "{records} records, {:.1}/{:.1} MiB read ({:.1} MiB/s), {} files, {:.1} MiB written, ETA {eta}",
            bytes_in as f64 / 1048576.0,
            planned as f64 / 1048576.0,
            rate / 1048576.0,
            progress.files.load(Ordering::Relaxed),
            progress.bytes_out.load(Ordering::Relaxed) as f64 / 1048576.0,
        );
        if tty && !final_line {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut summaries = Vec::new();
    let mut failures = Vec::new();
    loop {
        tokio::select! {
            done = jobs.join_next() => match done {
                None => break,
                Some(Ok(Ok(s))) => summaries.push(s),
                Some(Ok(Err(e))) => failures.push(e.to_string()),
                Some(Err(e)) => failures.push(e.to_string()),
            },
            _ = tick.tick() => report(false),
            _ = tokio::signal::ctrl_c() => {
                cancel.cancel();
            }
        }
    }
    if tty {
        eprintln!();
    }
    report(true);
    summaries.sort_by_key(|s| s.partition);
    let secs = started.elapsed().as_secs_f64();
    let mut records = 0;
    let (mut not_json, mut mismatched) = (0, 0);
    for s in &summaries {
        records += s.records;
        not_json += s.values_not_json;
        mismatched += s.values_mismatched;
        let decoded = if args.value_schema.is_some() {
            format!(
                " ({} values not JSON, {} not matching the value schema)",
                s.values_not_json, s.values_mismatched
            )
        } else {
            String::new()
        };
        println!(
            "{}-{}: offsets {}..{} -> {} records in {} file(s), {} bytes{decoded}",
            s.topic,
            s.partition,
            s.start_offset,
            s.end_offset,
            s.records,
            s.files.len(),
            s.bytes_out
        );
    }
    println!(
        "exported {records} records from {} partition(s) to {target} in {secs:.1}s ({:.1} MiB/s read)",
        summaries.len(),
        progress.bytes_in.load(Ordering::Relaxed) as f64 / 1048576.0 / secs.max(1e-3)
    );
    if args.value_schema.is_some() {
        println!(
            "value schema: {not_json} values not JSON objects, {mismatched} not matching the \
             schema (typed columns null, records exported)"
        );
    }
    if !failures.is_empty() {
        anyhow::bail!(
            "{} partition(s) failed (re-run to resume from their checkpoints):\n{}",
            failures.len(),
            failures.join("\n")
        );
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
