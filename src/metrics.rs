//! Broker metrics, rendered in the Prometheus text exposition format by the admin listener.
//!
//! Counters are lock-free atomics indexed by API key; per-error counters use a small mutexed
//! map (errors are rare); partition gauges are read from the partitions when scraped.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

const MAX_API_KEY: usize = 100;
/// Upper bounds (seconds) of the request latency histogram buckets.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            if s <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

pub struct Metrics {
    requests: Vec<AtomicU64>,
    latency: Vec<Histogram>,
    errors: Mutex<BTreeMap<(i16, i16), u64>>,
    pub connections_active: AtomicI64,
    pub connections_total: AtomicU64,
    pub connections_closed_bad_request: AtomicU64,
    /// Connections closed because a request body did not arrive in time.
    pub connections_closed_stalled: AtomicU64,
    pub produce_bytes: AtomicU64,
    pub produce_records: AtomicU64,
    pub fetch_bytes: AtomicU64,
    pub segments_deleted: AtomicU64,
    /// Retention checks completed (one pass over every partition).
    pub retention_checks: AtomicU64,
    /// Log cleaner passes (completed or cancelled), their I/O, and failed passes.
    pub cleaner_passes: AtomicU64,
    pub cleaner_bytes_read: AtomicU64,
    pub cleaner_bytes_written: AtomicU64,
    pub cleaner_records_removed: AtomicU64,
    pub cleaner_errors: AtomicU64,
    pub cleaner_last_pass_micros: AtomicU64,
    /// ISR changes committed by this broker as leader (Kafka's IsrShrinks/IsrExpands).
    pub isr_shrinks: AtomicU64,
    pub isr_expands: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: (0..MAX_API_KEY).map(|_| AtomicU64::new(0)).collect(),
            latency: (0..MAX_API_KEY).map(|_| Histogram::new()).collect(),
            errors: Mutex::new(BTreeMap::new()),
            connections_active: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            connections_closed_bad_request: AtomicU64::new(0),
            connections_closed_stalled: AtomicU64::new(0),
            produce_bytes: AtomicU64::new(0),
            produce_records: AtomicU64::new(0),
            fetch_bytes: AtomicU64::new(0),
            segments_deleted: AtomicU64::new(0),
            retention_checks: AtomicU64::new(0),
            cleaner_passes: AtomicU64::new(0),
            cleaner_bytes_read: AtomicU64::new(0),
            cleaner_bytes_written: AtomicU64::new(0),
            cleaner_records_removed: AtomicU64::new(0),
            cleaner_errors: AtomicU64::new(0),
            cleaner_last_pass_micros: AtomicU64::new(0),
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
        }
    }
}

fn api_name(key: i16) -> String {
    ApiKey::try_from(key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| key.to_string())
}

/// Consumer-group gauges for a scrape.
#[derive(Default)]
pub struct GroupGauges {
    /// (group type, state, number of groups)
    pub by_state: Vec<(&'static str, &'static str, usize)>,
    pub members: usize,
    pub rebalances: u64,
}

/// The transaction coordinator's gauges: transactions in progress (Ongoing, PrepareCommit,
/// PrepareAbort) and transactional ids per state.
pub fn render_transactions(out: &mut String, ongoing: usize, by_state: &[(&str, usize)]) {
    let _ = writeln!(out, "# HELP strata_transactions_ongoing Transactions open or completing.\n# TYPE strata_transactions_ongoing gauge\nstrata_transactions_ongoing {ongoing}");
    let _ = writeln!(
        out,
        "# HELP strata_transactional_ids Transactional ids, by state.\n# TYPE strata_transactional_ids gauge"
    );
    for (state, n) in by_state {
        let _ = writeln!(out, "strata_transactional_ids{{state=\"{state}\"}} {n}");
    }
}

/// The request memory pool's gauges (`queued.max.request.bytes`).
pub fn render_request_memory(out: &mut String, pool: &crate::memory_pool::MemoryPool) {
    let name = "strata_request_memory_reserved_bytes";
    let _ = writeln!(out, "# HELP {name} Bytes of requests being read or handled, reserved from queued.max.request.bytes.\n# TYPE {name} gauge\n{name} {}", pool.reserved());
    let name = "strata_request_memory_capacity_bytes";
    let capacity = pool
        .capacity()
        .map_or(-1, |c| c.min(i64::MAX as u64) as i64);
    let _ = writeln!(out, "# HELP {name} queued.max.request.bytes (-1: unbounded).\n# TYPE {name} gauge\n{name} {capacity}");
    let name = "strata_request_memory_waits_total";
    let _ = writeln!(out, "# HELP {name} Requests whose connection stopped reading until request memory was free.\n# TYPE {name} counter\n{name} {}", pool.waits());
}

/// One partition's gauges for a scrape.
pub struct PartitionGauges {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    pub segments: usize,
    /// Compacted partitions only: cleanable bytes / (clean + cleanable bytes).
    pub cleaner_dirty_ratio: Option<f64>,
    /// This broker leads the partition.
    pub leader: bool,
    /// Led here with an ISR smaller than the replica set.
    pub under_replicated: bool,
}

impl Metrics {
    pub fn record_request(&self, api_key: i16, elapsed: Duration) {
        if let Some(c) = self.requests.get(api_key as usize) {
            c.fetch_add(1, Ordering::Relaxed);
            self.latency[api_key as usize].observe(elapsed);
        }
    }

    pub fn record_error(&self, api_key: i16, error_code: i16) {
        if let Ok(mut m) = self.errors.lock() {
            *m.entry((api_key, error_code)).or_default() += 1;
        }
    }

    pub fn render(&self, partitions: &[PartitionGauges], groups: &GroupGauges) -> String {
        let mut out = String::with_capacity(8192);
        render_groups(&mut out, groups);
        self.render_requests(&mut out);
        self.render_broker_gauges(&mut out, partitions);
        render_partitions(&mut out, partitions);
        self.render_cleaner(&mut out, partitions);
        out
    }

    /// Requests, their latency histograms and the error codes returned, by API.
    fn render_requests(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP strata_requests_total Requests handled, by API.\n# TYPE strata_requests_total counter");
        for (k, c) in self.requests.iter().enumerate() {
            let v = c.load(Ordering::Relaxed);
            if v > 0 {
                let _ = writeln!(
                    out,
                    "strata_requests_total{{api=\"{}\"}} {v}",
                    api_name(k as i16)
                );
            }
        }
        let _ = writeln!(out, "# HELP strata_request_duration_seconds Time from request decoded to response written.\n# TYPE strata_request_duration_seconds histogram");
        for (k, h) in self.latency.iter().enumerate() {
            let count = h.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let api = api_name(k as i16);
            for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "strata_request_duration_seconds_bucket{{api=\"{api}\",le=\"{b}\"}} {}",
                    h.buckets[i].load(Ordering::Relaxed)
                );
            }
            let _ = writeln!(
                out,
                "strata_request_duration_seconds_bucket{{api=\"{api}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "strata_request_duration_seconds_sum{{api=\"{api}\"}} {}",
                h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "strata_request_duration_seconds_count{{api=\"{api}\"}} {count}"
            );
        }
        let _ = writeln!(out, "# HELP strata_request_errors_total Error codes returned, by API and error.\n# TYPE strata_request_errors_total counter");
        if let Ok(m) = self.errors.lock() {
            for ((k, code), v) in m.iter() {
                let err = kafka_protocol::ResponseError::try_from_code(*code)
                    .map(|e| format!("{e:?}"))
                    .unwrap_or_else(|| code.to_string());
                let _ = writeln!(
                    out,
                    "strata_request_errors_total{{api=\"{}\",error=\"{err}\"}} {v}",
                    api_name(*k)
                );
            }
        }
    }

    /// Broker-wide gauges and counters.
    fn render_broker_gauges(&self, out: &mut String, partitions: &[PartitionGauges]) {
        let count = |f: fn(&PartitionGauges) -> bool| partitions.iter().filter(|p| f(p)).count();
        let gauges: [(&str, &str, i64); 14] = [
            (
                "strata_partitions_leader",
                "Partitions this broker leads.",
                count(|p| p.leader) as i64,
            ),
            (
                "strata_partitions_under_replicated",
                "Partitions led here whose ISR is smaller than their replica set.",
                count(|p| p.under_replicated) as i64,
            ),
            (
                "strata_isr_shrinks_total",
                "ISR shrinks committed for partitions led here.",
                self.isr_shrinks.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_isr_expands_total",
                "ISR expansions committed for partitions led here.",
                self.isr_expands.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_connections_active",
                "Open client connections.",
                self.connections_active.load(Ordering::Relaxed),
            ),
            (
                "strata_connections_total",
                "Client connections accepted.",
                self.connections_total.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_connections_closed_bad_request_total",
                "Connections closed for a malformed, oversized or unsupported request.",
                self.connections_closed_bad_request.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_connections_closed_stalled_total",
                "Connections closed because a request's body did not arrive within connections.max.idle.ms.",
                self.connections_closed_stalled.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_produce_bytes_total",
                "Record batch bytes appended.",
                self.produce_bytes.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_produce_records_total",
                "Records appended.",
                self.produce_records.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_fetch_bytes_total",
                "Record bytes returned to fetchers.",
                self.fetch_bytes.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_log_segments_deleted_total",
                "Segments deleted by retention or DeleteRecords.",
                self.segments_deleted.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_log_retention_checks_total",
                "Retention checks completed (every log.retention.check.interval.ms).",
                self.retention_checks.load(Ordering::Relaxed) as i64,
            ),
            (
                "strata_partitions",
                "Partitions hosted.",
                partitions.len() as i64,
            ),
        ];
        for (name, help, v) in gauges {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
    }

    fn render_cleaner(&self, out: &mut String, partitions: &[PartitionGauges]) {
        let counters: [(&str, &str, &AtomicU64); 5] = [
            (
                "strata_log_cleaner_passes_total",
                "Log cleaner passes run (completed or cancelled).",
                &self.cleaner_passes,
            ),
            (
                "strata_log_cleaner_bytes_cleaned_total",
                "Bytes of segments the log cleaner read and recopied.",
                &self.cleaner_bytes_read,
            ),
            (
                "strata_log_cleaner_bytes_written_total",
                "Bytes the log cleaner wrote to cleaned segments.",
                &self.cleaner_bytes_written,
            ),
            (
                "strata_log_cleaner_records_removed_total",
                "Records the log cleaner removed (superseded values and expired tombstones).",
                &self.cleaner_records_removed,
            ),
            (
                "strata_log_cleaner_errors_total",
                "Log cleaner passes that failed.",
                &self.cleaner_errors,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let name = "strata_log_cleaner_last_pass_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Duration of the last log cleaner pass.\n# TYPE {name} gauge\n{name} {}",
            self.cleaner_last_pass_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let name = "strata_partition_cleaner_dirty_ratio";
        let _ = writeln!(
            out,
            "# HELP {name} Compacted partitions: cleanable bytes / (clean + cleanable bytes).\n# TYPE {name} gauge"
        );
        for p in partitions {
            if let Some(ratio) = p.cleaner_dirty_ratio {
                let _ = writeln!(
                    out,
                    "{name}{{topic=\"{}\",partition=\"{}\"}} {ratio}",
                    p.topic, p.partition
                );
            }
        }
    }
}

/// Consumer groups by type and state, members and rebalances.
fn render_groups(out: &mut String, groups: &GroupGauges) {
    let _ = writeln!(
        out,
        "# HELP strata_groups Consumer groups, by type and state.\n# TYPE strata_groups gauge"
    );
    for (kind, state, n) in &groups.by_state {
        let _ = writeln!(
            out,
            "strata_groups{{type=\"{kind}\",state=\"{state}\"}} {n}"
        );
    }
    let _ = writeln!(out, "# HELP strata_group_members Members of all consumer groups.\n# TYPE strata_group_members gauge\nstrata_group_members {}", groups.members);
    let _ = writeln!(out, "# HELP strata_group_rebalances_total Rebalances completed (classic generations and KIP-848 target assignments).\n# TYPE strata_group_rebalances_total counter\nstrata_group_rebalances_total {}", groups.rebalances);
}

/// Offsets, size and segments of every hosted partition.
fn render_partitions(out: &mut String, partitions: &[PartitionGauges]) {
    type Getter = fn(&PartitionGauges) -> String;
    let per_partition: [(&str, &str, Getter); 5] = [
        (
            "strata_partition_log_start_offset",
            "First offset of the partition log.",
            |p| p.log_start_offset.to_string(),
        ),
        (
            "strata_partition_log_end_offset",
            "Next offset to be written.",
            |p| p.log_end_offset.to_string(),
        ),
        (
            "strata_partition_high_watermark",
            "Offset up to which records are committed.",
            |p| p.high_watermark.to_string(),
        ),
        (
            "strata_partition_size_bytes",
            "Bytes in local segments.",
            |p| p.size_bytes.to_string(),
        ),
        ("strata_partition_segments", "Local segments.", |p| {
            p.segments.to_string()
        }),
    ];
    for (name, help, get) in per_partition {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for p in partitions {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                p.topic,
                p.partition,
                get(p)
            );
        }
    }
}
