//! Replication data plane: partition leadership as decided by the control plane, the leader's
//! follower tracking (high watermark, ISR), and the followers' replica fetchers.
//!
//! Interface with the control plane (the Raft metadata quorum, see [`crate::controller`]), in
//! this order after start-up and again after every change it commits:
//! 1. [`crate::broker::Broker::set_cluster_brokers`]: every registered broker with its
//!    listeners (followers connect to `inter.broker.listener.name`, else the first listener);
//! 2. [`crate::broker::Broker::set_isr_change_sink`]: where this broker, as a leader, proposes
//!    ISR changes (Kafka's AlterPartition). The sink answers the committed [`LeaderAndIsr`]
//!    (with the bumped partition epoch) or an [`AlterPartitionError`]; the leader then applies
//!    it, and the control plane should also publish it as a new partition state;
//! 3. [`crate::broker::Broker::apply_partition_states`] (blocking): leader, leader epoch,
//!    replicas, ISR and partition epoch per partition. This broker becomes leader or follower
//!    exactly as Kafka's `Partition.makeLeader` / `makeFollower` do; states older than the
//!    partition epoch already applied are ignored; fetchers are (re)started; the group and
//!    transaction coordinators load or unload the `__consumer_offsets` /
//!    `__transaction_state` partitions this broker starts or stops leading (they follow it as
//!    [`crate::broker::CatalogListener`]s). Nothing of it is
//!    persisted: after a restart the control plane applies the states again, and until then
//!    the broker behaves as a single node.
//!
//! [`in_process::InProcessController`] implements this for brokers in one process (tests).
//!
//! The state lives with the partitions in [`crate::broker`] ([`crate::broker::leadership`],
//! [`crate::broker::replica_set`], [`crate::broker::replica_manager`]); this module holds the
//! tasks that act on it, which the runtime spawns and cancels.
//!
//! Until a state is applied a partition behaves as on a single node: this broker leads it with
//! ISR = {itself} and the high watermark follows the log end offset, with no extra lock on the
//! append path.
//!
//! Concurrency: per partition, the replica set (`state::ReplicaSet`) is behind its own mutex,
//! taken before the log lock and never the other way round; role, leader, epoch and ISR sizes
//! are atomics written under both, so the produce and fetch paths read them without locking.
//! Fetchers and the ISR updater are tasks owned by [`run`], which the runtime spawns and
//! cancels; they ask the partition to change rather than share its locks.
//!
//! Crash consistency: leader epochs live in the log's `leader-epoch-checkpoint`; a replica
//! restarts from its `replication-offset-checkpoint` high watermark once a state is applied.
//! Retries: fetch errors back off by `replica.fetch.backoff.ms`; a refused or unanswered ISR
//! change is proposed again by the next fetch or expiration check.

pub mod fetcher;
pub mod in_process;

pub use crate::broker::leadership::{
    AlterPartitionError, AlterPartitionRequest, BrokerEndpoint, ClusterBroker, IsrChangeSink,
    LeaderAndIsr, PartitionLeadership, ReplicationError,
};
pub use crate::broker::replica_manager::{IsrJob, ReplicaManager};
pub use crate::broker::replica_set as state;

use std::sync::Arc;

use tokio::sync::mpsc;

/// Runs the replication services until `shutdown`: the replica fetchers, the ISR updater
/// (sends proposals through the sink) and the ISR expiration check (every half
/// `replica.lag.time.max.ms`, as in Kafka).
pub async fn run(
    broker: Arc<crate::broker::Broker>,
    tiering: Option<Arc<crate::tiering::Tiering>>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let tasks = tokio_util::task::TaskTracker::new();
    tasks.spawn(fetcher::manage(broker.clone(), tiering, shutdown.clone()));
    if let Some(rx) = broker.replication().take_isr_receiver() {
        tasks.spawn(update_isr(broker.clone(), rx, shutdown.clone()));
    }
    tasks.spawn(expire_isr(broker.clone(), shutdown.clone()));
    tasks.close();
    tasks.wait().await;
}

async fn update_isr(
    broker: Arc<crate::broker::Broker>,
    mut rx: mpsc::UnboundedReceiver<IsrJob>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let job = tokio::select! {
            _ = shutdown.cancelled() => return,
            job = rx.recv() => match job { Some(j) => j, None => return },
        };
        let Some(sink) = broker.replication().sink() else {
            tracing::debug!(topic = %job.partition.topic, partition = job.partition.index, "no ISR change sink: ISR stays");
            job.partition.isr_change_failed(&job.request);
            continue;
        };
        let request = job.request.clone();
        let answer = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = sink.alter_partition(request) => a,
        };
        match answer {
            Ok(committed) => {
                let before = job.isr_len_before;
                let counter = if committed.isr.len() < before {
                    Some(&broker.metrics.isr_shrinks)
                } else if committed.isr.len() > before {
                    Some(&broker.metrics.isr_expands)
                } else {
                    None
                };
                if let Some(c) = counter {
                    c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                tracing::info!(topic = %job.partition.topic, partition = job.partition.index, isr = ?committed.isr, partition_epoch = committed.partition_epoch, "ISR updated");
                let p = job.partition.clone();
                let now = crate::clock::now_ms();
                let _ = crate::blocking::run(move || p.isr_change_committed(&committed, now)).await;
            }
            Err(e) => {
                if e.is_retriable() {
                    tracing::info!(topic = %job.partition.topic, partition = job.partition.index, error = %e, "ISR change not committed; will propose again");
                } else {
                    tracing::debug!(topic = %job.partition.topic, partition = job.partition.index, error = %e, "ISR change refused");
                }
                job.partition.isr_change_failed(&job.request);
            }
        }
    }
}

async fn expire_isr(
    broker: Arc<crate::broker::Broker>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let every = (broker.config.replication.replica_lag_time_max / 2)
        .max(std::time::Duration::from_millis(10));
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let b = broker.clone();
        let shrink = move || {
            let now = crate::clock::now_ms();
            for p in b.all_partitions() {
                if let Some(request) = p.maybe_shrink_isr(now) {
                    b.replication().propose(p, request);
                }
            }
        };
        if crate::blocking::run(shrink).await.is_err() {
            tracing::error!("ISR expiration check panicked");
        }
    }
}
