//! What a request costs and how its response carries the throttle time (KIP-219).
//!
//! A request's "thread time" is the time its handler spent running: polling on the async
//! workers plus the closures it ran on the blocking pool ([`crate::blocking::run`] adds
//! those through a task-local). Time spent waiting (a fetch long poll, a join waiting for the
//! rebalance) is not counted, as Kafka does not count time in purgatory.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ResponseKind;

tokio::task_local! {
    /// Nanoseconds the current request spent on the blocking pool.
    static BLOCKING_NANOS: Arc<AtomicU64>;
}

/// Runs a request handler and returns its output with the thread time it used.
pub async fn measure_thread_time<F: Future>(handler: F) -> (F::Output, Duration) {
    let blocking = Arc::new(AtomicU64::new(0));
    let mut polling = Duration::ZERO;
    let handler = BLOCKING_NANOS.scope(blocking.clone(), handler);
    let mut handler = std::pin::pin!(handler);
    let output = std::future::poll_fn(|cx| {
        let started = Instant::now();
        let poll = handler.as_mut().poll(cx);
        polling += started.elapsed();
        poll
    })
    .await;
    let blocking = Duration::from_nanos(blocking.load(Ordering::Relaxed));
    (output, polling + blocking)
}

/// Wraps a closure bound for the blocking pool so that its run time counts towards the
/// current request's thread time (when called inside [`measure_thread_time`]).
pub fn account_blocking<R>(f: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let counter = BLOCKING_NANOS.try_with(|c| c.clone()).ok();
    move || {
        let started = Instant::now();
        let out = f();
        if let Some(c) = counter {
            c.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        out
    }
}

/// Kafka's request quota unit: thread time as a percentage of one second of one thread.
pub fn thread_time_percent(d: Duration) -> f64 {
    d.as_nanos() as f64 * 100.0 / 1e9
}

/// Sets `throttle_time_ms` on a response that has the field (SASL and WriteTxnMarkers
/// responses do not); encoding leaves it out at versions without it.
pub fn set_throttle_time(response: &mut ResponseKind, throttle_time_ms: i32) {
    macro_rules! set {
        ($($variant:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$variant(r) => r.throttle_time_ms = throttle_time_ms,)*
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        DescribeConfigs,
        AlterConfigs,
        IncrementalAlterConfigs,
        DescribeLogDirs,
        CreatePartitions,
        ElectLeaders,
        DescribeCluster,
        FindCoordinator,
        JoinGroup,
        SyncGroup,
        Heartbeat,
        LeaveGroup,
        OffsetCommit,
        OffsetFetch,
        DescribeGroups,
        ListGroups,
        DeleteGroups,
        OffsetDelete,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas,
        AlterClientQuotas,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ProduceResponse, SaslHandshakeResponse};

    #[tokio::test]
    async fn thread_time_counts_running_not_waiting() {
        let (out, used) = measure_thread_time(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let f = account_blocking(|| std::thread::sleep(Duration::from_millis(20)));
            tokio::task::spawn_blocking(f).await.unwrap();
            7
        })
        .await;
        assert_eq!(out, 7);
        assert!(used >= Duration::from_millis(20), "{used:?}");
        assert!(
            used < Duration::from_millis(45),
            "waiting was counted: {used:?}"
        );
        assert_eq!(thread_time_percent(Duration::from_millis(250)), 25.0);
    }

    #[test]
    fn throttle_time_is_set_where_the_response_has_it() {
        let mut r = ResponseKind::Produce(ProduceResponse::default());
        set_throttle_time(&mut r, 1234);
        assert!(matches!(r, ResponseKind::Produce(p) if p.throttle_time_ms == 1234));
        let mut r = ResponseKind::SaslHandshake(SaslHandshakeResponse::default());
        set_throttle_time(&mut r, 1234);
    }
}
