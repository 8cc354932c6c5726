//! `strata cleaner status`: the log cleaner's state read from a running broker's admin
//! `/metrics` (dirty ratio of every compacted partition, the cleaner's totals).

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub(super) enum CleanerCommand {
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

pub(super) fn run(command: CleanerCommand) -> ExitCode {
    let CleanerCommand::Status { admin, topic } = command;
    match cleaner_status(&admin, topic.as_deref()) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
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
