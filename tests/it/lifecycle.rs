//! Topic and partition lifecycle: auto-creation, deletion, DeleteRecords, CreatePartitions,
//! segment rolling and retention.

use std::time::Duration;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreatePartitionsRequest, DeleteRecordsRequest, DeleteTopicsRequest, MetadataRequest,
    MetadataResponse,
};
use kafka_protocol::records::Compression;

use crate::client::Client;
use crate::harness::*;

async fn metadata_for(c: &mut Client, topic: &str, allow_auto: bool) -> MetadataResponse {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = allow_auto;
    c.call(12, &req).await
}

async fn delete_topic(c: &mut Client, topic: &str) -> i16 {
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![name(topic)];
    req.timeout_ms = 10_000;
    let resp = c.call(5, &req).await;
    resp.responses[0].error_code
}

async fn delete_records(c: &mut Client, topic: &str, partition: i32, offset: i64) -> (i16, i64) {
    let mut p = DeleteRecordsPartition::default();
    p.partition_index = partition;
    p.offset = offset;
    let mut t = DeleteRecordsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = DeleteRecordsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let resp = c.call(2, &req).await;
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_auto_creates_topics_only_when_allowed() {
    let b = TestBroker::start_with(&[("num.partitions", "3")]).await;
    let mut c = b.client().await;
    let no = metadata_for(&mut c, "not-yet", false).await;
    assert_eq!(no.topics[0].error_code, 3);
    let yes = metadata_for(&mut c, "auto-made", true).await;
    assert_eq!(yes.topics[0].error_code, 0);
    assert_eq!(yes.topics[0].partitions.len(), 3, "num.partitions");
    assert!(!yes.topics[0].topic_id.is_nil());
    assert_eq!(
        produce(&mut c, "auto-made", 2, batch(1)).await.error_code,
        0
    );
    let bad = metadata_for(&mut c, "bad name", true).await;
    assert_eq!(bad.topics[0].error_code, 17);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_topic_is_gone_and_can_be_recreated_empty_with_a_new_id() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let old_id = create_topic(&mut c, "doomed", 1).await;
    produce(&mut c, "doomed", 0, batch(5)).await;
    assert_eq!(delete_topic(&mut c, "doomed").await, 0);
    assert_eq!(produce(&mut c, "doomed", 0, batch(1)).await.error_code, 3);
    assert_eq!(
        delete_topic(&mut c, "doomed").await,
        3,
        "second delete: unknown topic"
    );
    let new_id = create_topic(&mut c, "doomed", 1).await;
    assert_ne!(new_id, old_id);
    assert_eq!(
        list_offset(&mut c, "doomed", 0, -1).await.offset,
        0,
        "recreated empty"
    );
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(list_offset(&mut c, "doomed", 0, -1).await.offset, 0);
    let md = metadata_for(&mut c, "doomed", false).await;
    assert_eq!(md.topics[0].topic_id, new_id);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_offset_and_survives_restart() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "trim", 1).await;
    for _ in 0..4 {
        produce(&mut c, "trim", 0, batch(2)).await;
    }
    assert_eq!(delete_records(&mut c, "trim", 0, 3).await, (0, 3));
    assert_eq!(list_offset(&mut c, "trim", 0, -2).await.offset, 3);
    let p = fetch(&mut c, "trim", 0, FetchArgs::default()).await;
    assert_eq!(p.error_code, 1, "fetch below the log start is out of range");
    let p = fetch(
        &mut c,
        "trim",
        0,
        FetchArgs {
            offset: 3,
            ..FetchArgs::default()
        },
    )
    .await;
    assert_eq!(p.error_code, 0);
    assert_eq!(p.log_start_offset, 3);
    assert_eq!(
        delete_records(&mut c, "trim", 0, 100).await.0,
        1,
        "beyond the high watermark"
    );
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(
        list_offset(&mut c, "trim", 0, -2).await.offset,
        3,
        "log start kept"
    );
    assert_eq!(list_offset(&mut c, "trim", 0, -1).await.offset, 8);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_grows_a_topic_and_refuses_to_shrink_it() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "grow", 1).await;
    let req = |count: i32| {
        let mut t = CreatePartitionsTopic::default();
        t.name = name("grow");
        t.count = count;
        t.assignments = None;
        let mut r = CreatePartitionsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = 10_000;
        r
    };
    let resp = c.call(3, &req(3)).await;
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(produce(&mut c, "grow", 2, batch(1)).await.error_code, 0);
    let resp = c.call(3, &req(2)).await;
    assert_eq!(resp.results[0].error_code, 37, "INVALID_PARTITIONS");
    // A count no broker should size its work by is refused before anything is opened.
    let started = std::time::Instant::now();
    let resp = c.call(3, &req(i32::MAX)).await;
    assert_eq!(resp.results[0].error_code, 37, "INVALID_PARTITIONS");
    assert!(
        resp.results[0]
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("at most 100000")),
        "{:?}",
        resp.results[0].error_message
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Growing fails part-way (the fifth new partition's metadata file): the topic keeps its
    // three partitions and no directory of the others stays.
    let fault = strata::log::io_fault::inject(
        strata::log::io_fault::Fault::new(b.dir.path(), strata::log::io_fault::Op::Rename)
            .on_files_ending_with("partition.metadata.tmp")
            .after(4)
            .errno(24),
    );
    let resp = c.call(3, &req(10)).await;
    assert_eq!(resp.results[0].error_code, 56, "KAFKA_STORAGE_ERROR");
    drop(fault);
    assert_eq!(
        entries_starting_with(b.dir.path(), "grow-"),
        ["grow-0", "grow-1", "grow-2"]
    );
    assert_eq!(produce(&mut c, "grow", 3, batch(1)).await.error_code, 3);
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    assert_eq!(list_offset(&mut c, "grow", 2, -1).await.offset, 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_segments_roll_and_reads_and_timestamp_lookups_span_them() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "rolling",
        1,
        &[
            ("internal.segment.bytes", "2048"),
            ("index.interval.bytes", "256"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let base = now_ms() - 100_000;
    let v = vec![b'r'; 300];
    for i in 0..40i64 {
        let r = produce(
            &mut c,
            "rolling",
            0,
            batch_with(
                &[&v, &v],
                &[base + 2 * i, base + 2 * i + 1],
                Compression::None,
                None,
            ),
        )
        .await;
        assert_eq!((r.error_code, r.base_offset), (0, 2 * i));
    }
    let segments = std::fs::read_dir(b.dir.path().join("rolling-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count();
    assert!(segments > 5, "expected many segments, got {segments}");
    // Read everything back, one fetch per response, following the offsets.
    let mut next = 0;
    let mut fetches = 0;
    while next < 80 {
        let p = fetch(
            &mut c,
            "rolling",
            0,
            FetchArgs {
                offset: next,
                ..FetchArgs::default()
            },
        )
        .await;
        assert_eq!(p.error_code, 0);
        let offsets = record_offsets(&p.records);
        assert!(!offsets.is_empty(), "no progress at {next}");
        assert_eq!(offsets[0], next);
        next = *offsets.last().unwrap() + 1;
        fetches += 1;
    }
    assert_eq!(next, 80);
    assert!(fetches > 1, "one fetch stops at a segment end");
    for target in [0i64, 17, 40, 79] {
        let r = list_offset(&mut c, "rolling", 0, base + target).await;
        assert_eq!(
            (r.offset, r.timestamp),
            (target, base + target),
            "timestamp lookup {target}"
        );
    }
    let m = list_offset(&mut c, "rolling", 0, -3).await;
    assert_eq!((m.offset, m.timestamp), (79, base + 79));
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    for target in [5i64, 63] {
        let r = list_offset(&mut c, "rolling", 0, base + target).await;
        assert_eq!(
            (r.offset, r.timestamp),
            (target, base + target),
            "after restart {target}"
        );
    }
    let r = produce(&mut c, "rolling", 0, batch(1)).await;
    assert_eq!(r.base_offset, 80);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_bytes_deletes_old_segments_and_moves_the_log_start() {
    let b = TestBroker::start_with(&[("log.retention.check.interval.ms", "100")]).await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "retained",
        1,
        &[
            ("internal.segment.bytes", "2048"),
            ("retention.bytes", "4096"),
        ],
    )
    .await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let v = vec![b'q'; 500];
    for _ in 0..30 {
        produce(
            &mut c,
            "retained",
            0,
            batch_with(&[&v], &[now_ms()], Compression::None, None),
        )
        .await;
    }
    let mut start = 0;
    for _ in 0..50 {
        start = list_offset(&mut c, "retained", 0, -2).await.offset;
        if start > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(start > 0, "retention never ran");
    assert!(
        start <= 30 - 4,
        "kept at least retention.bytes: start {start}"
    );
    assert_eq!(list_offset(&mut c, "retained", 0, -1).await.offset, 30);
    let p = fetch(
        &mut c,
        "retained",
        0,
        FetchArgs {
            offset: start,
            ..FetchArgs::default()
        },
    )
    .await;
    assert_eq!(p.error_code, 0);
    assert_eq!(record_offsets(&p.records).first(), Some(&start));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_by_topic_id_with_an_empty_name_resolves_the_id() {
    // What the Java consumer sends for the topics of a regex assignment (v12+): an id and an
    // empty, not null, name.
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "by-id", 2).await;
    let id = metadata_for(&mut c, "by-id", false).await.topics[0].topic_id;
    let ask = |topic_id: uuid::Uuid| {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(name(""));
        t.topic_id = topic_id;
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![t]);
        req
    };
    let resp: MetadataResponse = c.call(12, &ask(id)).await;
    let t = &resp.topics[0];
    assert_eq!(t.error_code, 0);
    assert_eq!(t.name.as_ref().map(|n| n.0.as_str()), Some("by-id"));
    assert_eq!(t.partitions.len(), 2);
    let resp: MetadataResponse = c.call(12, &ask(uuid::Uuid::from_u128(7))).await;
    assert_eq!(resp.topics[0].error_code, 100, "UNKNOWN_TOPIC_ID");
}
