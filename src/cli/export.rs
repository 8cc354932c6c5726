//! `strata export`: a topic's records as Parquet files for bulk loads. Plans every partition
//! (remote manifest + local segments, the active one included), exports them `--parallelism`
//! at a time, prints progress to stderr and a summary to stdout. The export itself (planning, conversion,
//! checkpoints) is `strata_tiering::export`; this file finds the partitions and runs them.

use std::collections::{BTreeSet, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use strata::config::BrokerConfig;
use strata_tiering::export::{
    self, iceberg, ExportError, ExportOptions, ExportRange, PartitionSummary, PlanInput, Progress,
    Target, ValueSchema,
};
use strata_tiering::{PartitionId, RemoteStore};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub(super) struct ExportArgs {
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
    /// Stop before this offset (exclusive; default: the last stable offset the log dir shows,
    /// active segment included: below the high watermark checkpoint and any open transaction).
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
    /// Make `<out>/topic=<topic>` an Apache Iceberg table (format version 2, partitioned by
    /// Kafka partition and by day of the record timestamp; filesystem-catalog layout with
    /// `metadata/version-hint.text`), committed after the files land: each record is in the
    /// table once, whatever run was killed where.
    #[arg(long)]
    iceberg: bool,
    /// With --iceberg: commit the table through this Iceberg REST catalog (e.g.
    /// http://127.0.0.1:8181), as table <topic> in --iceberg-namespace. The files stay in
    /// --out; the table is registered with the catalog, then committed through it. A bearer
    /// token, if the catalog needs one, is read from STRATA_ICEBERG_CATALOG_TOKEN; OAuth2
    /// client credentials (`<client_id>:<client_secret>`) from
    /// STRATA_ICEBERG_CATALOG_CREDENTIAL, exchanged at STRATA_ICEBERG_CATALOG_OAUTH2_SERVER_URI
    /// (default <URI>/v1/oauth/tokens) with STRATA_ICEBERG_CATALOG_SCOPE (default catalog).
    #[arg(long, requires = "iceberg", value_name = "URI")]
    iceberg_catalog: Option<String>,
    /// The REST catalog namespace of the tables.
    #[arg(long, default_value = "kafka", requires = "iceberg_catalog")]
    iceberg_namespace: String,
}

pub(super) fn run(args: ExportArgs) -> ExitCode {
    let (config, overrides) = (args.config.clone(), args.overrides.clone());
    super::run_with_config(config.as_deref(), &overrides, false, |c| export(c, args))
}

/// Plans and exports every chosen partition, then prints the summary. Fails, after the
/// summary, when a partition failed; a re-run resumes from the checkpoints.
async fn export(config: BrokerConfig, args: ExportArgs) -> anyhow::Result<()> {
    let range = export_range(&args)?;
    let topic = args.topic.as_str();
    let sources = find_partitions(&config, topic, &args.partitions).await?;
    // Read the value schema before anything is written.
    let value_schema = read_value_schema(args.value_schema.as_deref())?;
    let target = Arc::new(Target::open(&args.out, &config.tiering.store)?);
    let mut options = export_options(&args, value_schema);
    let partitions: Vec<i32> = sources.partitions.iter().copied().collect();
    let catalog = match &args.iceberg_catalog {
        Some(uri) => {
            let env = |name: &str| std::env::var(name).ok();
            let auth = iceberg::rest::CatalogAuth::from_properties(
                env("STRATA_ICEBERG_CATALOG_TOKEN"),
                env("STRATA_ICEBERG_CATALOG_CREDENTIAL"),
                env("STRATA_ICEBERG_CATALOG_OAUTH2_SERVER_URI"),
                env("STRATA_ICEBERG_CATALOG_SCOPE"),
            );
            iceberg::Catalog::Rest(Arc::new(
                iceberg::rest::RestCatalog::connect(uri, &args.iceberg_namespace, auth).await?,
            ))
        }
        None => iceberg::Catalog::Files,
    };
    if args.iceberg {
        iceberg::prepare_in(&catalog, &target, topic, &partitions, &mut options.convert).await?;
    }
    let parallelism = args
        .parallelism
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let shared = Shared {
        target,
        range,
        options,
        progress: Arc::new(Progress::default()),
        cancel: CancellationToken::new(),
    };
    let display = ProgressDisplay {
        progress: shared.progress.clone(),
        started: Instant::now(),
        tty: std::io::stderr().is_terminal(),
    };
    eprintln!(
        "exporting {topic} partitions {:?} to {} ({parallelism} at a time)",
        sources.partitions, shared.target
    );
    let jobs = spawn_partition_exports(topic, sources, &shared, parallelism);
    let (mut summaries, failures) = wait_for_exports(jobs, &display, &shared.cancel).await;
    summaries.sort_by_key(|s| s.partition);
    print_summary(
        &summaries,
        &display,
        &shared.target,
        args.value_schema.is_some(),
    );
    if args.iceberg {
        // Also after a failure: what landed is committed, and a re-run adds the rest.
        strata::failpoint::hit(strata::failpoint::EXPORT_CHECKPOINTED);
        let c = iceberg::commit_in(
            &catalog,
            &shared.target,
            topic,
            &partitions,
            &shared.options.convert,
            &|step| match step {
                iceberg::CommitStep::ManifestsWritten => {
                    strata::failpoint::hit(strata::failpoint::ICEBERG_MANIFESTS_WRITTEN)
                }
                iceberg::CommitStep::MetadataCreated => {
                    strata::failpoint::hit(strata::failpoint::ICEBERG_METADATA_COMMITTED)
                }
            },
        )
        .await
        .context("committing the Iceberg table")?;
        if c.files > 0 {
            println!(
                "iceberg: committed {} file(s), {} records, snapshot {}, table metadata {}",
                c.files,
                c.records,
                c.snapshot_id.unwrap_or(-1),
                c.metadata_location
            );
        } else {
            println!(
                "iceberg: nothing new to commit; table metadata {}",
                c.metadata_location
            );
        }
    }
    let held_back: Vec<&PartitionSummary> = summaries
        .iter()
        .filter(|s| s.stopped_by.is_some() && s.end_offset < s.log_end)
        .collect();
    if failures.is_empty() && summaries.iter().all(|s| s.records == 0) && !held_back.is_empty() {
        anyhow::bail!(
            "nothing exported: the records of {} partition(s) are not exportable yet (see \
             above); re-run once they are",
            held_back.len()
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

/// The offsets and times of `--from-*` / `--to-*`.
fn export_range(args: &ExportArgs) -> anyhow::Result<ExportRange> {
    let time = |t: &Option<String>| -> anyhow::Result<Option<i64>> {
        t.as_deref()
            .map(export::parse_time)
            .transpose()
            .map_err(anyhow::Error::msg)
    };
    Ok(ExportRange {
        from_offset: args.from_offset,
        to_offset: args.to_offset,
        from_time: time(&args.from_time)?,
        to_time: time(&args.to_time)?,
    })
}

/// Where a topic's partitions are: in the bucket, in this broker's log.dirs, or both.
struct Sources {
    /// The bucket and the topic's id in it, when the bucket's catalog has the topic.
    remote: Option<(Arc<RemoteStore>, uuid::Uuid)>,
    /// Local partition directories: <log.dir>/<topic>-<partition>.
    local: HashMap<i32, PathBuf>,
    /// The partitions to export.
    partitions: BTreeSet<i32>,
}

/// The topic's partitions in the bucket's catalog and in log.dirs, narrowed to `--partitions`
/// when given; an error if a chosen partition or the whole topic is nowhere.
async fn find_partitions(
    config: &BrokerConfig,
    topic: &str,
    chosen: &[i32],
) -> anyhow::Result<Sources> {
    let mut partitions: BTreeSet<i32> = BTreeSet::new();
    let remote = match remote_topic(config, topic).await? {
        Some((store, topic_id, count)) => {
            partitions.extend(0..count);
            Some((store, topic_id))
        }
        None => None,
    };
    let local = local_partitions(config, topic);
    partitions.extend(local.keys().copied());
    if !chosen.is_empty() {
        for p in chosen {
            if !partitions.contains(p) {
                anyhow::bail!("topic {topic} has no partition {p} here or in the bucket");
            }
        }
        partitions = chosen.iter().copied().collect();
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
    Ok(Sources {
        remote,
        local,
        partitions,
    })
}

/// The bucket, the topic's id and its partition count, when the bucket's catalog has the
/// topic. A broker without tiering still has the default file:// store; its absence (or an
/// unreadable catalog) is then no error.
async fn remote_topic(
    config: &BrokerConfig,
    topic: &str,
) -> anyhow::Result<Option<(Arc<RemoteStore>, uuid::Uuid, i32)>> {
    let store = match RemoteStore::open(&config.tiering.store) {
        Ok(store) => Arc::new(store),
        Err(e) if config.tiering.enabled => return Err(e.into()),
        Err(_) => return Ok(None),
    };
    match strata_tiering::catalog::load(&store).await {
        Ok(Some((cat, _))) => Ok(cat
            .topics
            .get(topic)
            .map(|t| (store.clone(), t.topic_id, t.partitions))),
        Ok(None) => Ok(None),
        Err(e) if config.tiering.enabled => {
            Err(e).with_context(|| format!("reading the catalog of {store}"))
        }
        Err(_) => Ok(None),
    }
}

/// The topic's partition directories in log.dirs: <log.dir>/<topic>-<partition>.
fn local_partitions(config: &BrokerConfig, topic: &str) -> HashMap<i32, PathBuf> {
    let mut local = HashMap::new();
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
                local.insert(p, e.path());
            }
        }
    }
    local
}

/// The `--value-schema` file, parsed.
fn read_value_schema(path: Option<&Path>) -> anyhow::Result<Option<Arc<ValueSchema>>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let schema =
        ValueSchema::from_json(&raw).with_context(|| format!("value schema {}", path.display()))?;
    Ok(Some(Arc::new(schema)))
}

/// File and row group sizes, the zstd level and the value schema of the Parquet files.
fn export_options(args: &ExportArgs, value_schema: Option<Arc<ValueSchema>>) -> ExportOptions {
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
    options
}

/// What every partition's export shares.
#[derive(Clone)]
struct Shared {
    target: Arc<Target>,
    range: ExportRange,
    options: ExportOptions,
    progress: Arc<Progress>,
    cancel: CancellationToken,
}

/// Where one partition's segments are.
struct PartitionSource {
    topic: String,
    partition: i32,
    remote: Option<(Arc<RemoteStore>, PartitionId)>,
    local_dir: Option<PathBuf>,
    high_watermark: Option<i64>,
}

/// Spawns one export per partition; at most `parallelism` of them run at once.
fn spawn_partition_exports(
    topic: &str,
    sources: Sources,
    shared: &Shared,
    parallelism: usize,
) -> JoinSet<Result<PartitionSummary, ExportError>> {
    let limit = Arc::new(Semaphore::new(parallelism));
    let mut jobs = JoinSet::new();
    for p in sources.partitions {
        let remote = sources.remote.as_ref().map(|(s, id)| {
            (
                s.clone(),
                PartitionId {
                    topic: topic.to_string(),
                    topic_id: *id,
                    partition: p,
                },
            )
        });
        let local_dir = sources.local.get(&p).cloned();
        let high_watermark = local_dir
            .as_ref()
            .and_then(|d| export::read_high_watermark(d.parent()?, topic, p));
        let source = PartitionSource {
            topic: topic.to_string(),
            partition: p,
            remote,
            local_dir,
            high_watermark,
        };
        let (shared, limit) = (shared.clone(), limit.clone());
        jobs.spawn(async move {
            let _permit = limit.acquire_owned().await;
            export_one_partition(source, shared).await
        });
    }
    jobs
}

/// Exports one partition from its checkpoint (or the range's start), planning again when
/// local retention deleted a segment after its upload.
async fn export_one_partition(
    source: PartitionSource,
    shared: Shared,
) -> Result<PartitionSummary, ExportError> {
    let (topic, p) = (source.topic.as_str(), source.partition);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (checkpoint, _) = shared.target.read_checkpoint(topic, p).await?;
        let from = checkpoint.map_or(shared.range.from_offset.unwrap_or(0), |c| c.next_offset);
        let plan = export::plan_partition(PlanInput {
            topic,
            partition: p,
            remote: source.remote.clone(),
            local_dir: source.local_dir.clone(),
            high_watermark: source.high_watermark,
            from,
        })
        .await?;
        match export::export_partition(
            Arc::new(plan),
            shared.target.clone(),
            shared.range,
            shared.options.clone(),
            shared.progress.clone(),
            shared.cancel.clone(),
        )
        .await
        {
            // Local retention deleted a segment after its upload: plan again.
            Err(e) if e.needs_new_plan() && attempt < 5 => continue,
            other => return other,
        }
    }
}

/// Collects every partition's result, printing progress each second and cancelling the
/// exports on Ctrl-C; the summaries and the failures, in completion order.
async fn wait_for_exports(
    mut jobs: JoinSet<Result<PartitionSummary, ExportError>>,
    display: &ProgressDisplay,
    cancel: &CancellationToken,
) -> (Vec<PartitionSummary>, Vec<String>) {
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
            _ = tick.tick() => display.report(false),
            _ = tokio::signal::ctrl_c() => {
                cancel.cancel();
            }
        }
    }
    if display.tty {
        eprintln!();
    }
    display.report(true);
    (summaries, failures)
}

/// The progress line on stderr: rewritten in place on a terminal, one line each otherwise.
struct ProgressDisplay {
    progress: Arc<Progress>,
    started: Instant,
    tty: bool,
}

impl ProgressDisplay {
    fn report(&self, final_line: bool) {
        let progress = &self.progress;
        let records = progress.records.load(Ordering::Relaxed);
        let bytes_in = progress.bytes_in.load(Ordering::Relaxed);
        let planned = progress.bytes_planned.load(Ordering::Relaxed).max(bytes_in);
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
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
        if self.tty && !final_line {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }
}

/// What a partition's line says about the records after its export's end.
fn left_out(s: &PartitionSummary) -> String {
    if s.end_offset >= s.log_end {
        return String::new();
    }
    let why = match s.stopped_by {
        Some(bound) => bound.to_string(),
        None => "past the requested end".to_string(),
    };
    format!(
        "; offsets {}..{} not exported: {why}",
        s.end_offset, s.log_end
    )
}

/// One line per partition and the totals on stdout.
fn print_summary(
    summaries: &[PartitionSummary],
    display: &ProgressDisplay,
    target: &Target,
    with_value_schema: bool,
) {
    let secs = display.started.elapsed().as_secs_f64();
    let mut records = 0;
    let (mut not_json, mut mismatched) = (0, 0);
    for s in summaries {
        records += s.records;
        not_json += s.values_not_json;
        mismatched += s.values_mismatched;
        let decoded = if with_value_schema {
            format!(
                " ({} values not JSON, {} not matching the value schema)",
                s.values_not_json, s.values_mismatched
            )
        } else {
            String::new()
        };
        println!(
            "{}-{}: offsets {}..{} -> {} records in {} file(s), {} bytes{decoded}{}",
            s.topic,
            s.partition,
            s.start_offset,
            s.end_offset,
            s.records,
            s.files.len(),
            s.bytes_out,
            left_out(s)
        );
    }
    println!(
        "exported {records} records from {} partition(s) to {target} in {secs:.1}s ({:.1} MiB/s read)",
        summaries.len(),
        display.progress.bytes_in.load(Ordering::Relaxed) as f64 / 1048576.0 / secs.max(1e-3)
    );
    if with_value_schema {
        println!(
            "value schema: {not_json} values not JSON objects, {mismatched} not matching the \
             schema (typed columns null, records exported)"
        );
    }
}
