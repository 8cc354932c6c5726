//! Produce validation and acks, and Fetch long-polling, limits and topic ids.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, ListOffsetsRequest};
use kafka_protocol::records::Compression;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produced_records_are_fetched_back_with_their_offsets_and_values() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "roundtrip", 2).await;
    let r = produce(&mut c, "roundtrip", 1, batch(3)).await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let r = produce(&mut c, "roundtrip", 1, batch(2)).await;
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    let p = fetch(&mut c, "roundtrip", 1, FetchArgs::default()).await;
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 5);
    assert_eq!(record_offsets(&p.records), vec![0, 1, 2, 3, 4]);
    let mut recs = p.records.clone().unwrap();
    let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut recs).unwrap();
    assert_eq!(sets[0].records[1].value.as_deref(), Some(&b"value-1"[..]));
    // The other partition is untouched.
    let p0 = fetch(&mut c, "roundtrip", 0, FetchArgs::default()).await;
    assert_eq!(
        (p0.error_code, p0.high_watermark, count_records(&p0.records)),
        (0, 0, 0)
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_with_corrupted_crc_gets_corrupt_message() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "crc", 1).await;
    let mut bad = batch(2).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let r = produce(&mut c, "crc", 0, Bytes::from(bad)).await;
    assert_eq!(r.error_code, 2, "CORRUPT_MESSAGE");
    assert_eq!(
        list_offset(&mut c, "crc", 0, -1).await.offset,
        0,
        "nothing appended"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_bigger_than_max_message_bytes_gets_message_too_large() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "small", 1, &[("max.message.bytes", "1000")]).await;
    assert_eq!(r.error_code, 0);
    let big = vec![b'x'; 2000];
    let big_batch = batch_with(&[&big], &[now_ms()], Compression::None, None);
    assert!(big_batch.len() > 1000);
    let r = produce(&mut c, "small", 0, big_batch).await;
    assert_eq!(r.error_code, 10, "MESSAGE_TOO_LARGE");
    // A batch under the limit is fine.
    assert_eq!(produce(&mut c, "small", 0, batch(2)).await.error_code, 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_0_produce_gets_no_response_but_data_is_appended() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "fire", 1).await;
    let silent = c
        .send(PRODUCE_V, &produce_request("fire", 0, batch(4), 0))
        .await;
    // The next response on this connection must answer the next request, not the produce.
    let mut req = ListOffsetsRequest::default();
    req.replica_id = (-1).into();
    let id = c.send(LIST_OFFSETS_V, &req).await;
    let (header, _) = c.recv::<ListOffsetsRequest>(LIST_OFFSETS_V).await;
    assert_ne!(header.correlation_id, silent, "acks=0 must not be answered");
    assert_eq!(header.correlation_id, id);
    assert_eq!(
        list_offset(&mut c, "fire", 0, -1).await.offset,
        4,
        "acks=0 data appended"
    );
    assert_eq!(
        count_records(&fetch(&mut c, "fire", 0, FetchArgs::default()).await.records),
        4
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_unknown_topic_or_partition_gets_unknown_topic_or_partition() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = produce(&mut c, "no-such-topic", 0, batch(1)).await;
    assert_eq!(r.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    create_topic(&mut c, "one-partition", 1).await;
    let r = produce(&mut c, "one-partition", 7, batch(1)).await;
    assert_eq!(r.error_code, 3, "unknown partition");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_with_acks_5_gets_invalid_required_acks() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "acks", 1).await;
    let r = produce_acks(&mut c, "acks", 0, batch(1), 5).await;
    assert_eq!(r.error_code, 21, "INVALID_REQUIRED_ACKS");
    assert_eq!(
        list_offset(&mut c, "acks", 0, -1).await.offset,
        0,
        "nothing appended"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_poll_returns_as_soon_as_another_connection_produces() {
    let b = TestBroker::start().await;
    let mut setup = b.client().await;
    create_topic(&mut setup, "poll", 1).await;
    let mut consumer = b.client().await;
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let p = fetch(
            &mut consumer,
            "poll",
            0,
            FetchArgs {
                max_wait_ms: 5000,
                min_bytes: 1,
                ..FetchArgs::default()
            },
        )
        .await;
        (p, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "fetch must wait for data");
    let mut producer = b.client().await;
    assert_eq!(
        produce(&mut producer, "poll", 0, batch(2)).await.error_code,
        0
    );
    let (p, elapsed) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("fetch answered")
        .unwrap();
    assert!(
        elapsed < Duration::from_secs(2),
        "woken by the append, took {elapsed:?}"
    );
    assert_eq!(p.error_code, 0);
    assert_eq!(count_records(&p.records), 2);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_max_wait_elapses_with_an_empty_response_when_nothing_arrives() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "quiet", 1).await;
    produce(&mut c, "quiet", 0, batch(1)).await;
    let started = Instant::now();
    let p = fetch(
        &mut c,
        "quiet",
        0,
        FetchArgs {
            offset: 1,
            max_wait_ms: 800,
            min_bytes: 1,
            ..FetchArgs::default()
        },
    )
    .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(750),
        "returned early after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(3000),
        "overslept: {elapsed:?}"
    );
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 1);
    assert_eq!(count_records(&p.records), 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_at_offset_past_log_end_gets_offset_out_of_range() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "range", 1).await;
    produce(&mut c, "range", 0, batch(2)).await;
    let p = fetch(
        &mut c,
        "range",
        0,
        FetchArgs {
            offset: 3,
            ..FetchArgs::default()
        },
    )
    .await;
    assert_eq!(p.error_code, 1, "OFFSET_OUT_OF_RANGE");
    // Fetching at the log end itself is not an error.
    let p = fetch(
        &mut c,
        "range",
        0,
        FetchArgs {
            offset: 2,
            ..FetchArgs::default()
        },
    )
    .await;
    assert_eq!((p.error_code, count_records(&p.records)), (0, 0));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_max_bytes_smaller_than_first_batch_still_returns_that_whole_batch() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "kip74", 1).await;
    let v = vec![b'y'; 3000];
    let first = batch_with(&[&v, &v], &[now_ms(), now_ms()], Compression::None, None);
    let second = batch_with(&[&v], &[now_ms()], Compression::None, None);
    let first_len = first.len();
    produce(&mut c, "kip74", 0, first).await;
    produce(&mut c, "kip74", 0, second).await;
    let p = fetch(
        &mut c,
        "kip74",
        0,
        FetchArgs {
            partition_max_bytes: 100,
            ..FetchArgs::default()
        },
    )
    .await;
    assert_eq!(p.error_code, 0);
    let got = p.records.as_ref().map(|r| r.len()).unwrap_or(0);
    assert_eq!(got, first_len, "exactly the whole first batch");
    assert_eq!(record_offsets(&p.records), vec![0, 1]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_by_topic_id_works_and_unknown_topic_id_gets_unknown_topic_id() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let id = create_topic(&mut c, "by-id", 1).await;
    assert!(!id.is_nil(), "CreateTopics v7 returns the topic id");
    produce(&mut c, "by-id", 0, batch(3)).await;
    let by_id = |topic_id: uuid::Uuid| {
        let mut p = FetchPartition::default();
        p.partition = 0;
        p.fetch_offset = 0;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic_id = topic_id;
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.max_bytes = 1 << 20;
        req.topics = vec![t];
        req
    };
    for v in [13i16, 15, 17] {
        let resp = c.call(v, &by_id(id)).await;
        assert_eq!(resp.error_code, 0);
        let t = &resp.responses[0];
        assert_eq!(t.topic_id, id, "v{v}");
        assert_eq!(t.partitions[0].error_code, 0, "v{v}");
        assert_eq!(count_records(&t.partitions[0].records), 3, "v{v}");
    }
    let unknown = uuid::Uuid::new_v4();
    let resp = c.call(13, &by_id(unknown)).await;
    let t = &resp.responses[0];
    assert_eq!(t.topic_id, unknown);
    assert_eq!(t.partitions[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_in_one_partition_payload_get_invalid_record() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "two", 1).await;
    let mut both = batch(1).to_vec();
    both.extend_from_slice(&batch(1));
    let r = produce(&mut c, "two", 0, Bytes::from(both)).await;
    assert_eq!(r.error_code, 87, "INVALID_RECORD");
    assert_eq!(list_offset(&mut c, "two", 0, -1).await.offset, 0);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamp_too_far_in_the_future_gets_invalid_timestamp() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "future", 1).await;
    let later = now_ms() + 2 * 3_600_000;
    let r = produce(
        &mut c,
        "future",
        0,
        batch_with(&[b"x"], &[later], Compression::None, None),
    )
    .await;
    assert_eq!(r.error_code, 32, "INVALID_TIMESTAMP");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_append_time_topic_stamps_batches_with_broker_time() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(
        &mut c,
        "lat",
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await;
    assert_eq!(r.error_code, 0);
    let before = now_ms();
    let r = produce(
        &mut c,
        "lat",
        0,
        batch_with(&[b"a", b"b"], &[1_000, 1_001], Compression::Lz4, None),
    )
    .await;
    let after = now_ms();
    assert_eq!(
        r.error_code, 0,
        "old create times are fine with LogAppendTime"
    );
    assert!(
        (before..=after).contains(&r.log_append_time_ms),
        "{} not in [{before}, {after}]",
        r.log_append_time_ms
    );
    let p = fetch(&mut c, "lat", 0, FetchArgs::default()).await;
    let raw = p.records.clone().unwrap();
    // RecordBatch v2: attributes at 21 (timestamp type bit 3), max timestamp at 35. Consumers
    // take every record's timestamp from the max timestamp of a LogAppendTime batch.
    let attributes = i16::from_be_bytes([raw[21], raw[22]]);
    assert_ne!(attributes & 0x08, 0, "timestamp type LogAppendTime");
    let max_ts = i64::from_be_bytes(raw[35..43].try_into().unwrap());
    assert_eq!(max_ts, r.log_append_time_ms);
    let mut recs = raw.clone();
    let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut recs)
        .expect("valid CRC after rewrite");
    assert_eq!(sets[0].records.len(), 2);
    assert!(sets[0]
        .records
        .iter()
        .all(|r| r.timestamp_type == kafka_protocol::records::TimestampType::LogAppend));
    let by_ts = list_offset(&mut c, "lat", 0, r.log_append_time_ms).await;
    assert_eq!((by_ts.offset, by_ts.timestamp), (0, r.log_append_time_ms));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_compression_type_recompresses_producer_batches() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "gz", 1, &[("compression.type", "gzip")]).await;
    assert_eq!(r.error_code, 0);
    let vals: [&[u8]; 3] = [b"one", b"two", b"three"];
    let now = now_ms();
    let r = produce(
        &mut c,
        "gz",
        0,
        batch_with(&vals, &[now, now + 1, now + 2], Compression::Lz4, None),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let r = produce(&mut c, "gz", 0, batch(2)).await;
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    let p = fetch(&mut c, "gz", 0, FetchArgs::default()).await;
    let mut recs = p.records.clone().unwrap();
    let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut recs).unwrap();
    assert_eq!(sets.len(), 2);
    assert!(sets.iter().all(|s| s.compression == Compression::Gzip));
    let values: Vec<_> = sets[0]
        .records
        .iter()
        .map(|r| r.value.clone().unwrap())
        .collect();
    assert_eq!(
        values,
        vals.iter()
            .map(|v| Bytes::copy_from_slice(v))
            .collect::<Vec<_>>()
    );
    assert_eq!(record_offsets(&p.records), vec![0, 1, 2, 3, 4]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v13_by_topic_id_appends_and_unknown_id_gets_unknown_topic_id() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let id = create_topic(&mut c, "pid13", 1).await;
    let mut req = produce_request("pid13", 0, batch(2), -1);
    req.topic_data[0].name = Default::default();
    req.topic_data[0].topic_id = id;
    let resp = c.call(13, &req).await;
    let t = &resp.responses[0];
    assert_eq!(t.topic_id, id);
    assert_eq!(t.partition_responses[0].error_code, 0);
    assert_eq!(list_offset(&mut c, "pid13", 0, -1).await.offset, 2);
    req.topic_data[0].topic_id = uuid::Uuid::new_v4();
    let resp = c.call(13, &req).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 100);
    b.shutdown().await;
}

/// Kafka closes the connection when an acks=0 produce fails (the client gets no response, so
/// the close is its only signal to refresh metadata).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_0_produce_that_fails_closes_the_connection() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    c.send(PRODUCE_V, &produce_request("missing-topic", 0, batch(1), 0))
        .await;
    assert!(
        c.is_closed_by_peer(Duration::from_secs(3)).await,
        "broker kept the connection open after a failed acks=0 produce"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_waits_for_min_bytes_across_several_appends() {
    let b = TestBroker::start().await;
    let mut setup = b.client().await;
    create_topic(&mut setup, "accumulate", 1).await;
    let one = batch(1).len() as i32;
    let mut consumer = b.client().await;
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let p = fetch(
            &mut consumer,
            "accumulate",
            0,
            FetchArgs {
                max_wait_ms: 5000,
                min_bytes: one * 3,
                ..FetchArgs::default()
            },
        )
        .await;
        (p, started.elapsed())
    });
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "returned before min_bytes were available"
        );
        produce(&mut setup, "accumulate", 0, batch(1)).await;
    }
    let (p, elapsed) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    assert_eq!(count_records(&p.records), 3);
    b.shutdown().await;
}

/// Small produce requests append on the async worker and leave a roll to the blocking pool:
/// producers on one partition that rolls every few batches, with appends going both ways,
/// must still find every acknowledged record once, in each producer's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_on_a_rolling_partition_lose_duplicate_and_reorder_nothing() {
    const PRODUCERS: usize = 4;
    const BATCHES: usize = 150;
    const PER_BATCH: usize = 5;
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let created =
        create_topic_with(&mut c, "rolling", 1, &[("internal.segment.bytes", "2000")]).await;
    assert_eq!(created.error_code, 0);
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let mut c = b.client().await;
        tasks.push(tokio::spawn(async move {
            let (pid, epoch) = init_producer_id(&mut c).await;
            let mut acked = Vec::new();
            for n in 0..BATCHES {
                let values: Vec<Vec<u8>> = (0..PER_BATCH)
                    .map(|i| format!("p{p}-{:05}", n * PER_BATCH + i).into_bytes())
                    .collect();
                let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
                let ts = vec![now_ms(); PER_BATCH];
                let seq = (n * PER_BATCH) as i32;
                let records = batch_with(&refs, &ts, Compression::None, Some((pid, epoch, seq)));
                let r = produce(&mut c, "rolling", 0, records.clone()).await;
                assert_eq!(r.error_code, 0, "producer {p} batch {n}");
                // A retry of the batch just acknowledged is answered with its offset.
                if n % 50 == 49 {
                    let again = produce(&mut c, "rolling", 0, records).await;
                    assert_eq!((again.error_code, again.base_offset), (0, r.base_offset));
                }
                acked.extend(values);
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.unwrap());
    }
    let total = (PRODUCERS * BATCHES * PER_BATCH) as i64;
    let mut offsets = Vec::new();
    let mut by_producer: Vec<Vec<Vec<u8>>> = vec![Vec::new(); PRODUCERS];
    while (offsets.len() as i64) < total {
        let args = FetchArgs {
            offset: offsets.len() as i64,
            ..FetchArgs::default()
        };
        let p = fetch(&mut c, "rolling", 0, args).await;
        assert_eq!((p.error_code, p.high_watermark), (0, total));
        let mut records = p.records.clone().unwrap();
        for set in kafka_protocol::records::RecordBatchDecoder::decode_all(&mut records).unwrap() {
            for r in set.records {
                let value = r.value.unwrap().to_vec();
                let producer = (value[1] - b'0') as usize;
                offsets.push(r.offset);
                by_producer[producer].push(value);
            }
        }
    }
    assert_eq!(
        offsets,
        (0..total).collect::<Vec<_>>(),
        "dense offsets, each once"
    );
    assert_eq!(
        by_producer, acked,
        "every producer's records once, in its order"
    );
    let segments = std::fs::read_dir(b.broker().config.log_dirs[0].join("rolling-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(segments > 20, "the partition rolled ({segments} segments)");
    b.shutdown().await;
}

/// A long-polling fetch registers with every partition it reads and is answered by one of
/// them, or times out; the others must not keep it. Fetches over a busy partition and two
/// quiet ones, answered by the busy one or by their deadline, leave the quiet partitions
/// with at most the waiters still parked, not one entry per fetch ever made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_over_quiet_partitions_leave_no_waiters_behind() {
    const FETCHES: usize = 200;
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "quiet", 3).await;
    let mut producer = b.client().await;
    for n in 0..FETCHES {
        let mut req = fetch_request("quiet", 0, &FetchArgs::default());
        req.max_wait_ms = 20;
        req.min_bytes = 1;
        for index in 1..3 {
            let mut p = req.topics[0].partitions[0].clone();
            p.partition = index;
            req.topics[0].partitions.push(p);
        }
        // Every other fetch is answered by an append to partition 0 while it waits; the
        // rest time out.
        let fetching = c.call(FETCH_V, &req);
        let answered = async {
            if n % 2 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert_eq!(
                    produce(&mut producer, "quiet", 0, batch(1))
                        .await
                        .error_code,
                    0
                );
            }
        };
        let (resp, ()) = tokio::join!(fetching, answered);
        assert!(resp.responses[0]
            .partitions
            .iter()
            .all(|p| p.error_code == 0));
    }
    for index in 1..3 {
        let waiters = b.broker().partition("quiet", index).unwrap().waiter_count();
        assert!(
            waiters <= 1,
            "quiet partition {index} keeps {waiters} waiters after {FETCHES} fetches"
        );
    }
    b.shutdown().await;
}
