//! Rehydration (`strata.remote.rehydrate.enable`): remote segments that local retention
//! would keep come back to the broker's disk, one whole, checked segment at a time, and
//! consumers read them locally. A failing or corrupt bucket never changes the local log.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use strata_tiering::store::Op;
use strata_tiering::TieringMetrics;

use crate::harness::*;
use crate::tiering::{
    local_segments, offloaded_topic, read_all, read_all_from, remote_objects, set_topic_config,
    wait_until, TOPIC,
};

const REHYDRATE: &str = "strata.remote.rehydrate.enable";

fn metrics(b: &TestBroker) -> Arc<TieringMetrics> {
    b.services()
        .tiering
        .as_ref()
        .expect("tiering on")
        .metrics
        .clone()
}

fn partition_dir(root: &Path) -> PathBuf {
    root.join(format!("{TOPIC}-0"))
}

/// Temporary files of a download in the partition directory.
fn temp_files(root: &Path) -> Vec<String> {
    std::fs::read_dir(partition_dir(root))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// (base offset, size) of each local segment.
fn local_sizes(root: &Path) -> Vec<(i64, u64)> {
    local_segments(root)
        .into_iter()
        .map(|base| {
            let path = partition_dir(root).join(format!("{base:020}.log"));
            (base, std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
        })
        .collect()
}

async fn set(c: &mut crate::client::Client, name: &str, value: &str) {
    let (code, message) = set_topic_config(c, TOPIC, name, value).await;
    assert_eq!(code, 0, "{name}={value}: {message}");
}

/// Lets the tiering task run a few passes (its interval is 50 ms).
async fn a_few_passes() {
    tokio::time::sleep(Duration::from_millis(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_local_retention_brings_every_remote_segment_back() {
    let (b, mut c, end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    let remote = remote_objects(&root).len();
    assert!(remote >= 5, "tiered history: {remote} segments");

    // Off by default: a larger local retention alone brings nothing back.
    set(&mut c, "local.retention.bytes", "-1").await;
    a_few_passes().await;
    assert_eq!(local_segments(&root).len(), 1);
    assert_eq!(m.segments_rehydrated.load(Relaxed), 0);

    set(&mut c, REHYDRATE, "true").await;
    // The oldest segment's file is in place a moment before its download is counted.
    wait_until("every segment back on disk and counted", || {
        local_segments(&root).first() == Some(&0)
            && m.segments_rehydrated.load(Relaxed) as usize >= remote
    })
    .await;
    assert_eq!(m.segments_rehydrated.load(Relaxed) as usize, remote);
    assert_eq!(m.rehydration_failures.load(Relaxed), 0);
    assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));
    assert_eq!(list_offset_at(&mut c, 8, TOPIC, 0, -4).await.offset, 0);

    // Consumers read it locally: not one fetch goes to the bucket, and every record is there
    // once, in order.
    let remote_fetches = m.remote_fetches.load(Relaxed);
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    assert_eq!(m.remote_fetches.load(Relaxed), remote_fetches);

    // The bucket is untouched, and a lower local retention deletes the local copies again.
    assert_eq!(remote_objects(&root).len(), remote);
    set(&mut c, "local.retention.bytes", "1").await;
    wait_until("local copies deleted again", || {
        local_segments(&root).len() == 1
    })
    .await;
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    assert!(m.remote_fetches.load(Relaxed) > remote_fetches);

    // The rehydrated segments survive a restart like any other.
    set(&mut c, "local.retention.bytes", "-1").await;
    wait_until("back again", || local_segments(&root).first() == Some(&0)).await;
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(local_segments(&root).first(), Some(&0));
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

/// `local.retention.bytes` bounds what comes back exactly as it bounds what stays: the local
/// log ends up where retention would leave it, and the next passes neither delete nor
/// download anything (no churn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehydration_stops_where_local_retention_would_delete() {
    let (b, mut c, end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    let limit: u64 = 5 * 4096;
    set(&mut c, REHYDRATE, "true").await;
    set(&mut c, "local.retention.bytes", &limit.to_string()).await;
    wait_until("the local log grown to the limit", || {
        local_sizes(&root).iter().map(|(_, s)| s).sum::<u64>() >= limit
    })
    .await;
    a_few_passes().await;
    let settled = local_sizes(&root);
    let rehydrated = m.segments_rehydrated.load(Relaxed);
    let total: u64 = settled.iter().map(|(_, s)| s).sum();
    assert!(total >= limit, "{settled:?}");
    assert!(
        total - settled[0].1 < limit,
        "one segment more than retention keeps came back: {settled:?}"
    );
    a_few_passes().await;
    assert_eq!(local_sizes(&root), settled, "no churn");
    assert_eq!(m.segments_rehydrated.load(Relaxed), rehydrated);
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

/// A bucket that fails every segment read: each pass's download fails after its retries,
/// leaves no temporary file and changes nothing; once the bucket answers, the segments come
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_bucket_changes_nothing_and_rehydration_resumes() {
    let (b, mut c, end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    let store = b
        .services()
        .tiering
        .as_ref()
        .expect("tiering")
        .store
        .clone();
    let before = local_segments(&root);
    store.faults.fail_op_on_keys_containing(Op::Get, ".seg");
    set(&mut c, "local.retention.bytes", "-1").await;
    set(&mut c, REHYDRATE, "true").await;
    wait_until("failed rehydrations", || {
        m.rehydration_failures.load(Relaxed) >= 2
    })
    .await;
    assert_eq!(local_segments(&root), before);
    // A download in progress has its temporary file; once rehydration is off, none is left.
    set(&mut c, REHYDRATE, "false").await;
    wait_until("the download in progress given up", || {
        temp_files(&root).is_empty()
    })
    .await;
    a_few_passes().await;
    assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));
    assert_eq!(local_segments(&root), before);
    store.faults.clear();
    set(&mut c, REHYDRATE, "true").await;
    wait_until("every segment back on disk", || {
        local_segments(&root).first() == Some(&0)
    })
    .await;
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

/// A segment object corrupted in the bucket is refused (a CRC fails), again at every pass:
/// the local log never holds a byte of it, and nothing below it is brought back around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_remote_segment_is_never_installed() {
    let (b, mut c, _end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    let before = local_segments(&root);
    // The object of the segment right below the local log: the newest one.
    let newest = remote_objects(&root)
        .into_iter()
        .next_back()
        .expect("objects");
    let path = find_file(&root.join("objects"), &newest).expect("object file");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[200] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    set(&mut c, "local.retention.bytes", "-1").await;
    set(&mut c, REHYDRATE, "true").await;
    wait_until("refused at two passes", || {
        m.rehydration_failures.load(Relaxed) >= 2
    })
    .await;
    assert_eq!(local_segments(&root), before);
    assert_eq!(m.segments_rehydrated.load(Relaxed), 0);
    // The next pass may be downloading it again; once rehydration is off, nothing is left.
    set(&mut c, REHYDRATE, "false").await;
    wait_until("no staging directory", || temp_files(&root).is_empty()).await;
    a_few_passes().await;
    assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));
    assert_eq!(local_segments(&root), before);
    b.shutdown().await;
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(found) = find_file(&p, name) {
                return Some(found);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

/// A remote range read a second time is hot: it comes back although local retention (one
/// byte here) would delete it, stays while it is read, and goes once nobody read it for
/// `strata.remote.rehydrate.hot.ms`. One sequential read is not a second read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_range_read_again_comes_back_and_stays_while_it_is_read() {
    let (b, mut c, end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    set(&mut c, REHYDRATE, "true").await;
    set(&mut c, "strata.remote.rehydrate.hot.ms", "3000").await;

    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    a_few_passes().await;
    assert_eq!(local_segments(&root).len(), 1, "one sequential read");
    assert_eq!(m.segments_rehydrated.load(Relaxed), 0);

    // A second reader from offset 0.
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    wait_until("the range read again back on disk", || {
        local_segments(&root).first() == Some(&0)
    })
    .await;
    let back = local_segments(&root);
    // Read every half second for longer than hot.ms: it stays.
    let remote_fetches = m.remote_fetches.load(Relaxed);
    for _ in 0..10 {
        let got = read_all_from(&mut c, 0, 20).await;
        assert_eq!(got[..20], (0..20).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(local_segments(&root), back, "kept while read");
    }
    assert_eq!(m.remote_fetches.load(Relaxed), remote_fetches);
    // Not read for hot.ms: local retention deletes it again.
    wait_until("the range no longer read deleted locally", || {
        local_segments(&root).len() == 1
    })
    .await;
    assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    b.shutdown().await;
}

/// `strata.remote.rehydrate.hot.bytes` bounds what a hot range brings back beyond local
/// retention: the newest segments of the range come back, up to the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_range_comes_back_only_up_to_its_byte_budget() {
    let (b, mut c, end) = offloaded_topic().await;
    let root = b.dir.path().to_path_buf();
    let m = metrics(&b);
    let start = local_segments(&root)[0];
    let budget: u64 = 3 * 4096;
    set(&mut c, REHYDRATE, "true").await;
    set(
        &mut c,
        "strata.remote.rehydrate.hot.bytes",
        &budget.to_string(),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(read_all(&mut c, end).await, (0..end).collect::<Vec<_>>());
    }
    wait_until("part of the range back", || {
        m.segments_rehydrated.load(Relaxed) >= 2
    })
    .await;
    a_few_passes().await;
    let back: Vec<(i64, u64)> = local_sizes(&root)
        .into_iter()
        .filter(|(base, _)| *base < start)
        .collect();
    let bytes: u64 = back.iter().map(|(_, s)| s).sum();
    assert!(bytes <= budget, "{bytes} bytes back: {back:?}");
    assert!(back.len() >= 2 && back[0].0 > 0, "{back:?}");
    assert_eq!(back.len() as u64, m.segments_rehydrated.load(Relaxed));
    b.shutdown().await;
}
