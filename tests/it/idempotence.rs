//! Idempotent produce: duplicate retries, sequence gaps and producer epochs.

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_idempotent_batch_returns_the_same_base_offset_and_is_stored_once() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "idem", 1).await;
    produce(&mut c, "idem", 0, batch(2)).await; // offsets 0..1, non-idempotent
    let (pid, epoch) = init_producer_id(&mut c).await;
    assert_eq!(epoch, 0);
    let first = idempotent_batch(3, (pid, epoch, 0));
    let r1 = produce(&mut c, "idem", 0, first.clone()).await;
    assert_eq!((r1.error_code, r1.base_offset), (0, 2));
    let r2 = produce(&mut c, "idem", 0, first).await;
    assert_eq!(r2.error_code, 0, "a duplicate is acknowledged, not refused");
    assert_eq!(
        r2.base_offset, r1.base_offset,
        "duplicate answered with the original offset"
    );
    assert_eq!(
        list_offset(&mut c, "idem", 0, -1).await.offset,
        5,
        "stored once"
    );
    let p = fetch(&mut c, "idem", 0, FetchArgs::default()).await;
    assert_eq!(record_offsets(&p.records), vec![0, 1, 2, 3, 4]);
    // The next batch in sequence goes after it.
    let r3 = produce(&mut c, "idem", 0, idempotent_batch(1, (pid, epoch, 3))).await;
    assert_eq!((r3.error_code, r3.base_offset), (0, 5));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_sequence_gap_gets_out_of_order_sequence_number() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "gap", 1).await;
    let (pid, epoch) = init_producer_id(&mut c).await;
    assert_eq!(
        produce(&mut c, "gap", 0, idempotent_batch(3, (pid, epoch, 0)))
            .await
            .error_code,
        0
    );
    // Expected next sequence is 3; 5 leaves a gap.
    let r = produce(&mut c, "gap", 0, idempotent_batch(1, (pid, epoch, 5))).await;
    assert_eq!(r.error_code, 45, "OUT_OF_ORDER_SEQUENCE_NUMBER");
    assert_eq!(list_offset(&mut c, "gap", 0, -1).await.offset, 3);
    // The producer can continue at the right sequence.
    assert_eq!(
        produce(&mut c, "gap", 0, idempotent_batch(1, (pid, epoch, 3)))
            .await
            .error_code,
        0
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_producer_epoch_after_a_higher_one_gets_invalid_producer_epoch() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    create_topic(&mut c, "epochs", 1).await;
    let (pid, _) = init_producer_id(&mut c).await;
    assert_eq!(
        produce(&mut c, "epochs", 0, idempotent_batch(2, (pid, 1, 0)))
            .await
            .error_code,
        0
    );
    let r = produce(&mut c, "epochs", 0, idempotent_batch(1, (pid, 0, 2))).await;
    assert_eq!(r.error_code, 47, "INVALID_PRODUCER_EPOCH");
    assert_eq!(list_offset(&mut c, "epochs", 0, -1).await.offset, 2);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_hands_out_distinct_ids() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let (a, _) = init_producer_id(&mut c).await;
    let (bb, _) = init_producer_id(&mut c).await;
    assert_ne!(a, bb);
    b.shutdown().await;
}
