//! A clean shutdown and start on the same data dir keeps everything a client can observe.

use kafka_protocol::records::Compression;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_records_offsets_and_idempotent_dedup_of_the_last_batch() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let id = create_topic(&mut c, "durable", 2).await;
    let base = now_ms() - 30_000;
    produce(
        &mut c,
        "durable",
        0,
        batch_with(&[b"a", b"b"], &[base, base + 1], Compression::None, None),
    )
    .await;
    produce(
        &mut c,
        "durable",
        0,
        batch_with(&[b"c"], &[base + 2], Compression::Zstd, None),
    )
    .await;
    produce(&mut c, "durable", 1, batch(4)).await;
    let (pid, epoch) = init_producer_id(&mut c).await;
    let first = idempotent_batch(2, (pid, epoch, 0));
    let last = idempotent_batch(3, (pid, epoch, 2));
    assert_eq!(produce(&mut c, "durable", 0, first).await.base_offset, 3);
    assert_eq!(
        produce(&mut c, "durable", 0, last.clone())
            .await
            .base_offset,
        5
    );
    let before = fetch(&mut c, "durable", 0, FetchArgs::default()).await;
    drop(c);

    let b = b.restart().await;
    let mut c = b.client().await;
    let after = fetch(&mut c, "durable", 0, FetchArgs::default()).await;
    assert_eq!(after.error_code, 0);
    assert_eq!(after.high_watermark, 8);
    assert_eq!(after.records, before.records, "same bytes after restart");
    assert_eq!(record_offsets(&after.records), (0..8).collect::<Vec<_>>());
    let p1 = fetch(&mut c, "durable", 1, FetchArgs::default()).await;
    assert_eq!(count_records(&p1.records), 4);
    assert_eq!(list_offset(&mut c, "durable", 0, -2).await.offset, 0);
    assert_eq!(list_offset(&mut c, "durable", 0, -1).await.offset, 8);
    let by_ts = list_offset(&mut c, "durable", 0, base + 1).await;
    assert_eq!((by_ts.offset, by_ts.timestamp), (1, base + 1));

    // The producer's last batch is still recognised as a duplicate...
    let dup = produce(&mut c, "durable", 0, last).await;
    assert_eq!(
        (dup.error_code, dup.base_offset),
        (0, 5),
        "dedup survives restart"
    );
    assert_eq!(list_offset(&mut c, "durable", 0, -1).await.offset, 8);
    // ...a gap is still refused, and the next sequence appends.
    assert_eq!(
        produce(&mut c, "durable", 0, idempotent_batch(1, (pid, epoch, 9)))
            .await
            .error_code,
        45
    );
    let next = produce(&mut c, "durable", 0, idempotent_batch(1, (pid, epoch, 5))).await;
    assert_eq!((next.error_code, next.base_offset), (0, 8));

    // A new producer id is never one handed out before the restart.
    let (pid2, _) = init_producer_id(&mut c).await;
    assert_ne!(pid2, pid);

    // Topic id and a second restart.
    drop(c);
    let b = b.restart().await;
    let mut c = b.client().await;
    let r = create_topic_with(&mut c, "durable", 1, &[]).await;
    assert_eq!(r.error_code, 36, "topic still exists");
    assert_eq!(list_offset(&mut c, "durable", 0, -1).await.offset, 9);
    let mut p = kafka_protocol::messages::fetch_request::FetchPartition::default();
    p.partition_max_bytes = 1 << 20;
    let mut t = kafka_protocol::messages::fetch_request::FetchTopic::default();
    t.topic_id = id;
    t.partitions = vec![p];
    let mut req = kafka_protocol::messages::FetchRequest::default();
    req.topics = vec![t];
    let resp = c.call(13, &req).await;
    assert_eq!(
        resp.responses[0].partitions[0].error_code, 0,
        "topic id kept"
    );
    assert_eq!(count_records(&resp.responses[0].partitions[0].records), 9);
    b.shutdown().await;
}
