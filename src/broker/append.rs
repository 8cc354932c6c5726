//! Appending a produce request's batches, as Kafka's `ReplicaManager.appendRecords` does,
//! and waiting for the ISR as its `DelayedProduce` does.
//!
//! Per partition, in Kafka's order: valid `acks`, no client writes to internal topics, a
//! partition this broker leads, enough in-sync replicas for acks=all, the transaction
//! verification the caller supplies (KIP-890), then the append itself (CRC, size,
//! timestamps and producer sequence are checked by the log, without decompressing). An
//! acks=all append is then answered once the high watermark passes it, or fails when
//! leadership is lost, the ISR shrinks below min.insync.replicas, or the request times out.
//!
//! Results are protocol-independent ([`PartitionAppend`]); the produce handler turns them
//! into a response.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Broker, LeaderEpoch, Offset, Partition, TopicRef};
use crate::log::AppendError;

/// How a produce request is appended.
#[derive(Debug, Clone, Copy)]
pub struct AppendParams {
    /// 0, 1 or -1 (all); anything else is INVALID_REQUIRED_ACKS.
    pub acks: i16,
    /// Only the broker itself, and Kafka's own admin client, write internal topics.
    pub internal_topics_allowed: bool,
}

/// The batches for the partitions of one topic, in the request's order.
#[derive(Debug, Clone)]
pub struct AppendTopic {
    pub topic: TopicRef,
    pub partitions: Vec<(i32, Bytes)>,
}

/// What appending one partition's batch gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionAppend {
    /// Appended (or a retry of a batch already in the log). `error` is set when an acks=all
    /// append then failed to replicate in time or lost its partition's leadership.
    Appended {
        base_offset: Offset,
        /// The broker's time stamped on the batch for LogAppendTime topics, else -1.
        log_append_time: i64,
        log_start_offset: Offset,
        error: Option<ResponseError>,
    },
    /// This broker does not lead the partition: NOT_LEADER_OR_FOLLOWER, naming the leader
    /// and epoch it knows (KIP-951).
    NotLeader {
        leader: Option<i32>,
        epoch: LeaderEpoch,
    },
    /// Refused, with Kafka's message and, for records refused one by one, their (index in
    /// the batch, message).
    Failed {
        error: ResponseError,
        message: Option<String>,
        record_errors: Vec<(i32, String)>,
    },
}

impl PartitionAppend {
    fn failed(error: ResponseError, message: Option<String>) -> PartitionAppend {
        PartitionAppend::Failed {
            error,
            message,
            record_errors: Vec::new(),
        }
    }
}

/// What a produce request's appends gave: per topic of the request, each partition's
/// append in request order; then [`AppendResult::await_replication`] for acks=all.
#[derive(Default)]
pub struct AppendResult {
    pub topics: Vec<Vec<(i32, PartitionAppend)>>,
    awaiting: Vec<Awaiting>,
    /// Appends [`Blocking::Refused`] left for [`Broker::append_deferred`].
    deferred: Vec<Deferred>,
}

/// Where an append may run: on the blocking pool, which may wait on the disk, or on an async
/// worker, which must not ([`Partition::try_append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    Allowed,
    Refused,
}

/// An append that would have blocked: the partition, its batch and where its result goes.
struct Deferred {
    partition: Arc<Partition>,
    records: Bytes,
    min_isr: i32,
    slot: (usize, usize),
}

/// An acks=all append waiting for the ISR: where its result is, and the offset the high
/// watermark must reach.
struct Awaiting {
    topic_slot: usize,
    partition_slot: usize,
    partition: Arc<Partition>,
    required_offset: Offset,
    min_insync_replicas: i32,
}

impl Broker {
    /// Appends every partition's batch. `verify` is the transaction check of KIP-890: it
    /// refuses a transactional batch the transaction coordinator has not seen added.
    /// Blocking (appends write the log).
    ///
    /// With [`Blocking::Refused`] (an async worker) an append that would wait on the disk or
    /// on a lock is left out, its slot holding a placeholder, until
    /// [`Broker::append_deferred`] does it on the blocking pool
    /// ([`AppendResult::has_deferred`]).
    pub fn append_records(
        &self,
        topics: Vec<AppendTopic>,
        params: AppendParams,
        blocking: Blocking,
        verify: impl Fn(&Partition, &[u8]) -> Result<(), ResponseError>,
    ) -> AppendResult {
        let mut result = AppendResult {
            topics: Vec::with_capacity(topics.len()),
            ..AppendResult::default()
        };
        for t in topics {
            let topic = self.resolve(&t.topic).ok();
            let unknown = t.topic.unknown();
            let mut appends = Vec::with_capacity(t.partitions.len());
            for (index, records) in t.partitions {
                let slot = (result.topics.len(), appends.len());
                let append = if !matches!(params.acks, -1..=1) {
                    PartitionAppend::failed(ResponseError::InvalidRequiredAcks, None)
                } else if !params.internal_topics_allowed
                    && topic.as_ref().is_some_and(|t| t.is_internal())
                {
                    let message = "Cannot append to internal topic".to_string();
                    PartitionAppend::failed(ResponseError::InvalidTopicException, Some(message))
                } else {
                    let partition = topic
                        .as_ref()
                        .and_then(|t| t.partitions.get(usize::try_from(index).ok()?));
                    match partition {
                        None => PartitionAppend::failed(unknown, None),
                        Some(p) => {
                            let min_isr =
                                topic.as_ref().map_or(1, |t| t.config.min_insync_replicas);
                            let target = AppendTarget {
                                partition: p,
                                min_isr,
                                slot,
                            };
                            self.append_partition(
                                target,
                                records,
                                params,
                                blocking,
                                &verify,
                                &mut result,
                            )
                        }
                    }
                };
                appends.push((index, append));
            }
            result.topics.push(appends);
        }
        result
    }

    /// Does the appends [`Broker::append_records`] left out, in their slots. Blocking.
    pub fn append_deferred(
        &self,
        result: &mut AppendResult,
        params: AppendParams,
        verify: impl Fn(&Partition, &[u8]) -> Result<(), ResponseError>,
    ) {
        for d in std::mem::take(&mut result.deferred) {
            let target = AppendTarget {
                partition: &d.partition,
                min_isr: d.min_isr,
                slot: d.slot,
            };
            let append = self.append_partition(
                target,
                d.records,
                params,
                Blocking::Allowed,
                &verify,
                result,
            );
            let (topic_slot, partition_slot) = d.slot;
            if let Some(slot) = result
                .topics
                .get_mut(topic_slot)
                .and_then(|t| t.get_mut(partition_slot))
            {
                slot.1 = append;
            }
        }
    }

    fn append_partition(
        &self,
        AppendTarget {
            partition,
            min_isr,
            slot: (topic_slot, partition_slot),
        }: AppendTarget<'_>,
        records: Bytes,
        params: AppendParams,
        blocking: Blocking,
        verify: &impl Fn(&Partition, &[u8]) -> Result<(), ResponseError>,
        result: &mut AppendResult,
    ) -> PartitionAppend {
        if !partition.is_leader() {
            return not_leader(partition);
        }
        // acks=all needs min.insync.replicas (capped by the replication factor) in sync.
        if params.acks == -1 && !partition.has_enough_in_sync_replicas(min_isr) {
            let message =
                format!("The size of the current ISR is below min.insync.replicas {min_isr}");
            return PartitionAppend::failed(ResponseError::NotEnoughReplicas, Some(message));
        }
        if let Err(error) = verify(partition, &records) {
            self.metrics.record_error(0, error.code());
            return PartitionAppend::failed(error, None);
        }
        let appended = match blocking {
            Blocking::Allowed => partition.append(&records),
            Blocking::Refused => match partition.try_append(&records) {
                Some(appended) => appended,
                None => {
                    result.deferred.push(Deferred {
                        partition: partition.clone(),
                        records,
                        min_isr,
                        slot: (topic_slot, partition_slot),
                    });
                    // Replaced by append_deferred.
                    return PartitionAppend::failed(ResponseError::UnknownServerError, None);
                }
            },
        };
        match appended {
            Ok(info) => {
                if !info.duplicate {
                    self.metrics
                        .produce_bytes
                        .fetch_add(info.bytes as u64, Ordering::Relaxed);
                    self.metrics
                        .produce_records
                        .fetch_add(info.records as u64, Ordering::Relaxed);
                }
                // Already replicated (a single replica): answer without waiting.
                let required_offset = Offset(info.last_offset).next();
                let replicated = partition
                    .check_enough_replicas_reach_offset(required_offset, min_isr)
                    .unwrap_or(false);
                if params.acks == -1 && !replicated {
                    result.awaiting.push(Awaiting {
                        topic_slot,
                        partition_slot,
                        partition: partition.clone(),
                        required_offset,
                        min_insync_replicas: min_isr,
                    });
                }
                PartitionAppend::Appended {
                    base_offset: Offset(info.base_offset),
                    log_append_time: info.log_append_time,
                    log_start_offset: partition.offsets().log_start_offset,
                    error: None,
                }
            }
            Err(AppendError::NotLeaderOrFollower) => not_leader(partition),
            Err(e) => {
                let error = e.code();
                self.metrics.record_error(0, error.code());
                if matches!(e, AppendError::Io(_)) {
                    tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "append failed");
                } else {
                    tracing::debug!(topic = %partition.topic, partition = partition.index, error = %e, "rejected batch");
                }
                let message = Some(e.to_string());
                let record_errors = match e {
                    AppendError::RecordErrors { record_errors, .. } => record_errors,
                    _ => Vec::new(),
                };
                PartitionAppend::Failed {
                    error,
                    message,
                    record_errors,
                }
            }
        }
    }
}

/// The partition an append goes to, its topic's min.insync.replicas, and where its result
/// goes in the [`AppendResult`].
struct AppendTarget<'a> {
    partition: &'a Arc<Partition>,
    min_isr: i32,
    slot: (usize, usize),
}

fn not_leader(p: &Partition) -> PartitionAppend {
    let (leader, epoch) = p.leader_and_epoch();
    PartitionAppend::NotLeader { leader, epoch }
}

impl AppendResult {
    /// Whether appends wait for [`Broker::append_deferred`].
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Kafka's DelayedProduce: waits until every acks=all append is replicated to the ISR
    /// (woken by high-watermark moves), fails one whose partition lost leadership or whose
    /// ISR shrank below min.insync.replicas, and times the rest out (REQUEST_TIMED_OUT).
    pub async fn await_replication(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut awaiting = std::mem::take(&mut self.awaiting);
        loop {
            let notify = Arc::new(Notify::new());
            for a in &awaiting {
                a.partition.add_waiter(&notify);
            }
            awaiting.retain(|a| {
                let outcome = a
                    .partition
                    .check_enough_replicas_reach_offset(a.required_offset, a.min_insync_replicas);
                match outcome {
                    Ok(false) => true,
                    Ok(true) => false,
                    Err(code) => {
                        self.set_error(a, code);
                        false
                    }
                }
            });
            if awaiting.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notify.notified())
                .await
                .is_err()
            {
                for a in &awaiting {
                    self.set_error(a, ResponseError::RequestTimedOut);
                }
                return;
            }
        }
    }

    fn set_error(&mut self, a: &Awaiting, code: ResponseError) {
        if let Some((_, PartitionAppend::Appended { error, .. })) = self
            .topics
            .get_mut(a.topic_slot)
            .and_then(|t| t.get_mut(a.partition_slot))
        {
            *error = Some(code);
        }
    }
}
