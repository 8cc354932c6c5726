//! Recovery after an unclean stop: no clean-shutdown marker, checkpoints or final producer
//! snapshots; torn or corrupt tails are truncated.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use crate::harness::*;

fn active_segment(dir: &Path, partition_dir: &str) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir.join(partition_dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclean_restart_truncates_a_torn_tail_and_keeps_whole_batches() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "torn", 1).await;
    for _ in 0..3 {
        produce(&mut c, "torn", 0, batch(2)).await;
    }
    let (pid, epoch) = init_producer_id(&mut c).await;
    let last = idempotent_batch(2, (pid, epoch, 0));
    assert_eq!(
        produce(&mut c, "torn", 0, last.clone()).await.base_offset,
        6
    );
    drop(c);
    let half = batch(3);
    let b = b
        .crash_and_restart(|dir| {
            let seg = active_segment(dir, "torn-0");
            let mut f = OpenOptions::new().append(true).open(seg).unwrap();
            f.write_all(&half[..half.len() / 2]).unwrap();
        })
        .await;
    let mut c = b.client().await;
    assert_eq!(
        list_offset(&mut c, "torn", 0, -1).await.offset,
        8,
        "torn batch dropped"
    );
    let p = fetch(&mut c, "torn", 0, FetchArgs::default()).await;
    assert_eq!(record_offsets(&p.records), (0..8).collect::<Vec<_>>());
    // Producer state is rebuilt from the log: the last batch is still a duplicate.
    let dup = produce(&mut c, "torn", 0, last).await;
    assert_eq!((dup.error_code, dup.base_offset), (0, 6));
    let next = produce(&mut c, "torn", 0, batch(1)).await;
    assert_eq!((next.error_code, next.base_offset), (0, 8));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclean_restart_drops_a_last_batch_with_a_bad_crc() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "flipped", 1).await;
    for _ in 0..3 {
        produce(&mut c, "flipped", 0, batch(2)).await;
    }
    drop(c);
    let b = b
        .crash_and_restart(|dir| {
            let seg = active_segment(dir, "flipped-0");
            let mut bytes = std::fs::read(&seg).unwrap();
            let n = bytes.len();
            bytes[n - 3] ^= 0xff;
            std::fs::write(&seg, bytes).unwrap();
        })
        .await;
    let mut c = b.client().await;
    assert_eq!(
        list_offset(&mut c, "flipped", 0, -1).await.offset,
        4,
        "corrupt last batch dropped"
    );
    let p = fetch(&mut c, "flipped", 0, FetchArgs::default()).await;
    assert_eq!(record_offsets(&p.records), vec![0, 1, 2, 3]);
    assert_eq!(produce(&mut c, "flipped", 0, batch(1)).await.base_offset, 4);
    b.shutdown().await;
}
