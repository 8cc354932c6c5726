//! ListOffsets: earliest, latest, by timestamp and max timestamp.

use kafka_protocol::records::Compression;

use crate::harness::*;

const EARLIEST: i64 = -2;
const LATEST: i64 = -1;
const MAX_TIMESTAMP: i64 = -3;

/// Produces three batches with known timestamps relative to `base`:
/// offsets 0,1,2 at base, base+1, base+2; offsets 3,4 at base+10, base+11; offset 5 at base+5.
async fn produce_known_timestamps(c: &mut crate::client::Client, topic: &str, base: i64) {
    let r = produce(
        c,
        topic,
        0,
        batch_with(
            &[b"a", b"b", b"c"],
            &[base, base + 1, base + 2],
            Compression::None,
            None,
        ),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 0));
    let r = produce(
        c,
        topic,
        0,
        batch_with(
            &[b"d", b"e"],
            &[base + 10, base + 11],
            Compression::Lz4,
            None,
        ),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 3));
    let r = produce(
        c,
        topic,
        0,
        batch_with(&[b"f"], &[base + 5], Compression::None, None),
    )
    .await;
    assert_eq!((r.error_code, r.base_offset), (0, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_earliest_latest_by_timestamp_and_max_timestamp() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "times", 1).await;
    let empty = list_offset(&mut c, "times", 0, LATEST).await;
    assert_eq!((empty.error_code, empty.offset), (0, 0));
    let empty = list_offset(&mut c, "times", 0, MAX_TIMESTAMP).await;
    assert_eq!(empty.error_code, 0);
    assert_eq!(empty.offset, -1, "no max timestamp on an empty partition");

    let base = now_ms() - 60_000;
    produce_known_timestamps(&mut c, "times", base).await;

    let e = list_offset(&mut c, "times", 0, EARLIEST).await;
    assert_eq!((e.error_code, e.offset), (0, 0));
    let l = list_offset(&mut c, "times", 0, LATEST).await;
    assert_eq!((l.error_code, l.offset), (0, 6));

    let cases = [
        (base - 1000, 0, base),    // before everything: the first record
        (base, 0, base),           // exact match on the first record
        (base + 1, 1, base + 1),   // inside the first batch
        (base + 3, 3, base + 10),  // between: first record at or after, in offset order
        (base + 11, 4, base + 11), // the max
    ];
    for (ts, offset, found_ts) in cases {
        let r = list_offset(&mut c, "times", 0, ts).await;
        assert_eq!(r.error_code, 0, "ts {}", ts - base);
        assert_eq!(
            (r.offset, r.timestamp),
            (offset, found_ts),
            "lookup of base{:+}",
            ts - base
        );
    }
    let none = list_offset(&mut c, "times", 0, base + 100).await;
    assert_eq!(none.error_code, 0);
    assert_eq!(
        (none.offset, none.timestamp),
        (-1, -1),
        "nothing at or after the target"
    );

    let m = list_offset(&mut c, "times", 0, MAX_TIMESTAMP).await;
    assert_eq!(m.error_code, 0);
    assert_eq!((m.offset, m.timestamp), (4, base + 11));

    let unknown = list_offset(&mut c, "nope", 0, LATEST).await;
    assert_eq!(unknown.error_code, 3);
    b.shutdown().await;
}
