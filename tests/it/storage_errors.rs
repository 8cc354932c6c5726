//! Storage errors injected with `strata::log::io_fault` into an in-process broker (faults are
//! scoped to the broker's own data dir): a partition whose failed append cannot be rolled back
//! goes offline and comes back at the acknowledged end; DeleteTopics completes or leaves the
//! topic as it was; a CreateTopics that fails part-way leaves nothing on disk.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{DeleteTopicsRequest, MetadataRequest, MetadataResponse};
use strata::log::io_fault::{inject, Fault, Op, ENOSPC};

use crate::client::Client;
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_rollback_fails_is_offline_until_repaired_and_loses_nothing() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "wounded", 1).await;
    for _ in 0..3 {
        assert_eq!(produce(&mut c, "wounded", 0, batch(2)).await.error_code, 0);
    }
    // Half a batch reaches the `.log` and cutting it back fails too.
    let short = inject(
        Fault::new(b.dir.path(), Op::Write)
            .on_files_ending_with(".log")
            .short_write(),
    );
    let stuck = inject(
        Fault::new(b.dir.path(), Op::SetLen)
            .on_files_ending_with(".log")
            .times(u32::MAX),
    );
    assert_eq!(produce(&mut c, "wounded", 0, batch(2)).await.error_code, 56);
    drop(short);
    assert_eq!(
        produce(&mut c, "wounded", 0, batch(2)).await.error_code,
        56,
        "offline: refused"
    );
    let f = fetch(&mut c, "wounded", 0, FetchArgs::default()).await;
    assert_eq!(f.error_code, 56, "offline: fetches get KAFKA_STORAGE_ERROR");
    drop(stuck);
    // The next produce after the repair backoff repairs the log and lands at offset 6.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let repaired = loop {
        let r = produce(&mut c, "wounded", 0, batch(2)).await;
        if r.error_code == 0 {
            break r;
        }
        assert_eq!(r.error_code, 56);
        assert!(std::time::Instant::now() < deadline, "never repaired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(repaired.base_offset, 6);
    let f = fetch(&mut c, "wounded", 0, FetchArgs::default()).await;
    assert_eq!(f.error_code, 0);
    assert_eq!(f.high_watermark, 8);
    assert_eq!(record_offsets(&f.records), (0..8).collect::<Vec<_>>());
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    let f = fetch(&mut c, "wounded", 0, FetchArgs::default()).await;
    assert_eq!(record_offsets(&f.records), (0..8).collect::<Vec<_>>());
    drop(c);
    b.shutdown().await;
}

async fn partitions_listed(c: &mut Client, topic: &str) -> Option<usize> {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = false;
    let resp: MetadataResponse = c.call(12, &req).await;
    (resp.topics[0].error_code == 0).then(|| resp.topics[0].partitions.len())
}

async fn delete_topic(c: &mut Client, topic: &str) -> i16 {
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name(topic)];
    req.timeout_ms = 10_000;
    let resp = c.call(5, &req).await;
    resp.responses[0].error_code
}

fn dir_names(dir: &std::path::Path) -> Vec<String> {
    entries_starting_with(dir, "doomed")
}

async fn check_whole(c: &mut Client, when: &str) {
    assert_eq!(partitions_listed(c, "doomed").await, Some(3), "{when}");
    for p in 0..3 {
        let f = fetch(c, "doomed", p, FetchArgs::default()).await;
        assert_eq!(f.error_code, 0, "{when}: partition {p}");
        assert_eq!(
            record_offsets(&f.records),
            vec![0, 1],
            "{when}: partition {p}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_topics_that_cannot_rename_a_partition_dir_leaves_the_topic_whole() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "doomed", 3).await;
    for p in 0..3 {
        assert_eq!(produce(&mut c, "doomed", p, batch(2)).await.error_code, 0);
    }
    let before = dir_names(b.dir.path());
    let fault = inject(
        Fault::new(b.dir.path(), Op::Rename)
            .on_files_ending_with("doomed-2")
            .errno(ENOSPC),
    );
    assert_eq!(
        delete_topic(&mut c, "doomed").await,
        56,
        "KAFKA_STORAGE_ERROR"
    );
    assert_eq!(fault.failures(), 1);
    drop(fault);
    // The partitions renamed before the failure were renamed back.
    assert_eq!(dir_names(b.dir.path()), before);
    check_whole(&mut c, "after the failed DeleteTopics").await;
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    check_whole(&mut c, "after a restart").await;
    assert_eq!(delete_topic(&mut c, "doomed").await, 0);
    assert_eq!(partitions_listed(&mut c, "doomed").await, None);
    assert!(dir_names(b.dir.path()).is_empty());
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(partitions_listed(&mut c, "doomed").await, None);
    drop(c);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deletion_whose_catalog_rewrite_fails_is_completed_by_the_next_start() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "doomed", 3).await;
    for p in 0..3 {
        assert_eq!(produce(&mut c, "doomed", p, batch(2)).await.error_code, 0);
    }
    // The catalog file cannot be rewritten (a full disk): the renames committed the deletion,
    // the data is removed and the empty `-delete` dirs record it.
    let fault = inject(
        Fault::new(b.dir.path(), Op::Write)
            .on_files_ending_with("toml.tmp")
            .times(u32::MAX)
            .errno(ENOSPC),
    );
    assert_eq!(delete_topic(&mut c, "doomed").await, 0);
    assert!(fault.failures() >= 1);
    assert_eq!(partitions_listed(&mut c, "doomed").await, None);
    let left = dir_names(b.dir.path());
    assert_eq!(left.len(), 3, "{left:?}");
    for d in &left {
        assert!(d.ends_with("-delete"), "{d}");
        assert_eq!(
            std::fs::read_dir(b.dir.path().join(d)).unwrap().count(),
            0,
            "{d} is empty"
        );
    }
    drop(fault);
    drop(c);
    // A crash before any other catalog rewrite: the start completes the deletion.
    let b = b.crash_and_restart(|_| {}).await;
    let mut c = b.client().await;
    assert_eq!(partitions_listed(&mut c, "doomed").await, None);
    assert!(dir_names(b.dir.path()).is_empty());
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(partitions_listed(&mut c, "doomed").await, None);
    create_topic(&mut c, "doomed", 1).await;
    assert_eq!(produce(&mut c, "doomed", 0, batch(1)).await.base_offset, 0);
    drop(c);
    b.shutdown().await;
}

/// A topic whose creation fails part-way (the fourth partition's metadata file cannot be
/// renamed into place, as when the process is out of file descriptors) leaves none of its
/// partition directories behind, and is created whole once the fault is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_whose_creation_fails_part_way_leaves_no_partition_dirs() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let partition_dirs = |dir: &std::path::Path| entries_starting_with(dir, "halfway-");
    let fault = inject(
        Fault::new(b.dir.path(), Op::Rename)
            .on_files_ending_with("partition.metadata.tmp")
            .after(3)
            .errno(24),
    );
    let r = create_topic_with(&mut c, "halfway", 8, &[]).await;
    assert_eq!(
        r.error_code, 56,
        "KAFKA_STORAGE_ERROR: {:?}",
        r.error_message
    );
    assert!(
        r.error_message
            .as_deref()
            .unwrap_or("")
            .contains("os error 24"),
        "{:?}",
        r.error_message
    );
    assert_eq!(partition_dirs(b.dir.path()), Vec::<String>::new());
    drop(fault);
    assert_eq!(partitions_listed(&mut c, "halfway").await, None);

    let r = create_topic_with(&mut c, "halfway", 8, &[]).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(partition_dirs(b.dir.path()).len(), 8);
    for p in 0..8 {
        assert_eq!(produce(&mut c, "halfway", p, batch(1)).await.error_code, 0);
    }
    b.shutdown().await;
}
