//! Reading partitions for a fetch, as Kafka's `ReplicaManager.fetchMessages` and
//! `readFromLog` do, and waiting for data as its `DelayedFetch` does.
//!
//! Per partition: which replica may serve the fetcher (the leader, or any replica for
//! consumers since KIP-392), the fetcher's leader epoch, a diverging log (KIP-320), where
//! the read stops (log end for followers, last stable offset for read_committed, high
//! watermark otherwise), the follower's fetch state and the ISR expansion it may bring,
//! and the aborted transactions a read_committed consumer must skip. Per fetch: the byte
//! limits of KIP-74 (the first batch of the first partition with data is returned whole,
//! so a consumer always makes progress) and the long-poll, woken by appends and
//! high-watermark moves rather than by polling.
//!
//! Results are protocol-independent ([`PartitionRead`]): the fetch handler turns them into
//! a response, keeps the fetch sessions (KIP-227) and reads remote storage for the one
//! partition a fetch may leave to it ([`PartitionRead::Remote`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{
    Blocking, Broker, FollowerFetchError, LeaderEpoch, Offset, Partition, PartitionOffsets, Role,
    Topic, TopicRef,
};
use crate::log::txn_index::AbortedTxn;
use crate::protocol::{Chunk, SpliceBuf};

/// Where a fetcher reads one partition from, as its request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: Offset,
    pub partition_max_bytes: i32,
    /// The fetcher's leader epoch (-1: not checked).
    pub current_leader_epoch: LeaderEpoch,
    /// The epoch of the last record the fetcher has (KIP-320; -1 when unknown).
    pub last_fetched_epoch: LeaderEpoch,
    /// A follower's log start offset (-1 for consumers).
    pub log_start_offset: Offset,
}

/// Who fetches, and which records it may see.
#[derive(Debug, Clone, Copy)]
pub struct FetchParams {
    /// A follower's broker id, or -1 for a consumer.
    pub replica_id: i32,
    /// Followers, and consumers before KIP-392, read only from the leader.
    pub only_from_leader: bool,
    /// Stop at the last stable offset and name the aborted transactions.
    pub read_committed: bool,
    /// Remote storage is configured: a read below the local log start is left to it
    /// ([`PartitionRead::Remote`]) instead of failing.
    pub tiered: bool,
}

impl FetchParams {
    pub fn is_follower(&self) -> bool {
        self.replica_id >= 0
    }
}

/// When a fetch is answered: `max_bytes` over all partitions; waiting at most `max_wait`
/// until `min_bytes` have arrived.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    pub max_bytes: usize,
    pub min_bytes: usize,
    pub max_wait: Duration,
}

/// The partitions of one topic a fetch reads, in the request's order.
#[derive(Debug, Clone)]
pub struct FetchTopic {
    pub topic: TopicRef,
    pub partitions: Vec<(i32, FetchPosition)>,
}

/// What reading one partition gave.
#[derive(Clone)]
pub enum PartitionRead {
    /// The records from the fetch offset, possibly none. `aborted` is set for read_committed
    /// fetches: the aborted transactions among the records (empty when there are none).
    Records {
        offsets: PartitionOffsets,
        /// In memory (a small read, or none), or still in the segment file, sent from the
        /// page cache when the response is written.
        records: Chunk,
        aborted: Option<Vec<AbortedTxn>>,
    },
    /// The fetcher's log diverges from the leader's (KIP-320): it truncates to `end_offset`,
    /// the end of `epoch`, the largest epoch both logs have.
    Diverging {
        offsets: PartitionOffsets,
        epoch: LeaderEpoch,
        end_offset: Offset,
    },
    /// The fetch offset is below the local log start and the records are in remote storage
    /// only: the caller reads them (at most one partition per fetch, as in Kafka).
    Remote {
        offsets: PartitionOffsets,
        read: RemoteRead,
    },
    /// This broker may not serve the fetcher: NOT_LEADER_OR_FOLLOWER, naming the leader and
    /// epoch this broker knows (KIP-951).
    NotLeader {
        leader: Option<i32>,
        epoch: LeaderEpoch,
    },
    /// The partition could not be read; with its offsets when it exists and the fetcher is
    /// in its epoch.
    Failed {
        error: ResponseError,
        offsets: Option<PartitionOffsets>,
    },
}

/// A read left to remote storage.
#[derive(Clone)]
pub struct RemoteRead {
    pub topic: Arc<Topic>,
    pub partition: i32,
    pub offset: Offset,
    pub max_bytes: usize,
    /// Return the first batch whole even beyond `max_bytes` (nothing was read before it).
    pub min_one: bool,
    pub read_committed: bool,
}

/// What a fetch read: per topic of the request, each partition's read, in request order.
#[derive(Default)]
pub struct FetchResult {
    pub topics: Vec<Vec<(i32, PartitionRead)>>,
    /// Record bytes read locally.
    pub bytes: usize,
}

/// One pass over the fetch's partitions.
struct Pass {
    result: FetchResult,
    /// An error, a diverging epoch or a remote read: answer without waiting for data.
    answer_now: bool,
    /// Partitions read, with the (high watermark, log end offset) seen, to detect appends
    /// that race the wait.
    watched: Vec<(Arc<Partition>, Offset, Offset)>,
    remote: bool,
    /// [`Blocking::Refused`]: the pass runs on an async worker and stops, setting
    /// `would_block`, at the first partition whose read would wait on a lock or a repair;
    /// nothing it read counts, and the caller runs the pass again where blocking is allowed.
    blocking: Blocking,
    would_block: bool,
    /// What the pass changes, applied once it is complete ([`Broker::finish_pass`]), so that
    /// a pass that stopped changes nothing: the follower positions to record, the errors to
    /// count, and the bytes of throttled replicas (KIP-73).
    followers: Vec<FollowerFetch>,
    errors: Vec<ResponseError>,
    throttled_bytes: usize,
}

/// A follower's fetch to record on the partition (Kafka's `updateFollowerFetchState`), and
/// the slot of its read in the result, which becomes NOT_LEADER_OR_FOLLOWER if the partition
/// no longer counts it as a follower.
struct FollowerFetch {
    slot: (usize, usize),
    partition: Arc<Partition>,
    replica_id: i32,
    fetch_offset: Offset,
    log_start_offset: Offset,
    log_end_offset: Offset,
    bytes: usize,
}

impl Broker {
    /// Reads `topics`, waiting until `limits.min_bytes` are available or `limits.max_wait`
    /// passes (Kafka's DelayedFetch). A follower's fetch position is recorded by the first
    /// read only, as in Kafka. Errs only when a read task failed (a bug).
    pub async fn fetch(
        self: &Arc<Self>,
        topics: Arc<Vec<FetchTopic>>,
        params: FetchParams,
        limits: FetchLimits,
    ) -> Result<FetchResult, tokio::task::JoinError> {
        let deadline = Instant::now() + limits.max_wait;
        let mut first = true;
        loop {
            let record_position = std::mem::take(&mut first);
            let pass = self
                .run_pass(&topics, params, limits, record_position)
                .await?;
            if pass.result.bytes >= limits.min_bytes
                || pass.answer_now
                || pass.remote
                || Instant::now() >= deadline
                || pass.watched.is_empty()
            {
                return Ok(pass.result);
            }
            let notify = Arc::new(Notify::new());
            for (p, _, _) in &pass.watched {
                p.add_waiter(&notify);
            }
            // An append between the read and the registration would not wake us: re-check.
            if pass.watched.iter().any(|(p, hw, leo)| {
                let now = p.offsets();
                now.high_watermark != *hw || now.log_end_offset != *leo
            }) {
                continue;
            }
            if tokio::time::timeout_at(deadline, notify.notified())
                .await
                .is_err()
            {
                // Deadline: one last pass returns whatever has arrived.
                let last = self.run_pass(&topics, params, limits, false).await?;
                return Ok(last.result);
            }
        }
    }

    /// One pass over the partitions. A follower's runs here, on the async worker: it reads
    /// at the log end, whose batch headers are in the page cache, and hands the records to
    /// the socket by `sendfile`. Where it would wait on a lock (a roll, an ISR change) or
    /// repair a log, it runs on the blocking pool, as consumers' passes do.
    async fn run_pass(
        self: &Arc<Self>,
        topics: &Arc<Vec<FetchTopic>>,
        params: FetchParams,
        limits: FetchLimits,
        record_position: bool,
    ) -> Result<Pass, tokio::task::JoinError> {
        if params.is_follower() {
            let mut pass = self.read_pass(
                topics,
                params,
                limits.max_bytes,
                record_position,
                Blocking::Refused,
            );
            if !pass.would_block {
                self.finish_pass(&mut pass);
                if pass.followers.is_empty() {
                    return Ok(pass);
                }
                // A replica set was locked: record the rest of the positions where waiting
                // is allowed.
                let broker = self.clone();
                return crate::blocking::run(move || {
                    pass.blocking = Blocking::Allowed;
                    broker.finish_pass(&mut pass);
                    pass
                })
                .await;
            }
        }
        let broker = self.clone();
        let topics = topics.clone();
        crate::blocking::run(move || {
            let mut pass = broker.read_pass(
                &topics,
                params,
                limits.max_bytes,
                record_position,
                Blocking::Allowed,
            );
            broker.finish_pass(&mut pass);
            pass
        })
        .await
    }

    /// Applies what a complete pass changes: records the follower positions (proposing the
    /// ISR expansions they earn), counts the errors and the throttled bytes. With
    /// [`Blocking::Refused`], the positions from the first whose replica set is locked on
    /// stay in `pass.followers`, in order, for a call where blocking is allowed.
    fn finish_pass(&self, pass: &mut Pass) {
        let now = crate::clock::now_ms();
        for error in pass.errors.drain(..) {
            self.metrics.record_error(1, error.code());
        }
        if pass.throttled_bytes > 0 {
            let bytes = std::mem::take(&mut pass.throttled_bytes);
            self.replication.throttles.leader.record(bytes, now);
        }
        let mut followers = std::mem::take(&mut pass.followers).into_iter();
        while let Some(f) = followers.next() {
            let p = &f.partition;
            let recorded = match pass.blocking {
                Blocking::Allowed => Some(p.update_follower_fetch_state(
                    f.replica_id,
                    f.fetch_offset,
                    f.log_start_offset,
                    f.log_end_offset,
                    now,
                )),
                Blocking::Refused => p.try_update_follower_fetch_state(
                    f.replica_id,
                    f.fetch_offset,
                    f.log_start_offset,
                    f.log_end_offset,
                    now,
                ),
            };
            match recorded {
                None => {
                    pass.followers.push(f);
                    pass.followers.extend(followers);
                    return;
                }
                Some(Ok(Some(expansion))) => self.replication.propose(p.clone(), expansion),
                Some(Ok(None)) => {}
                Some(Err(FollowerFetchError::NotLeaderOrFollower)) => {
                    let (t, i) = f.slot;
                    if let Some(slot) = pass.result.topics.get_mut(t).and_then(|t| t.get_mut(i)) {
                        slot.1 = not_leader(p);
                        pass.result.bytes = pass.result.bytes.saturating_sub(f.bytes);
                        pass.answer_now = true;
                    }
                }
            }
        }
    }

    fn read_pass(
        &self,
        topics: &[FetchTopic],
        params: FetchParams,
        max_bytes: usize,
        record_position: bool,
        blocking: Blocking,
    ) -> Pass {
        let mut pass = Pass {
            result: FetchResult {
                topics: Vec::with_capacity(topics.len()),
                bytes: 0,
            },
            answer_now: false,
            watched: Vec::new(),
            remote: false,
            blocking,
            would_block: false,
            followers: Vec::new(),
            errors: Vec::new(),
            throttled_bytes: 0,
        };
        let mut remaining = max_bytes;
        for t in topics {
            let topic = self.resolve(&t.topic);
            let unknown = t.topic.unknown();
            let mut reads = Vec::with_capacity(t.partitions.len());
            for &(index, position) in &t.partitions {
                let partition = match &topic {
                    Ok(topic) => usize::try_from(index)
                        .ok()
                        .and_then(|i| topic.partitions.get(i))
                        .map(|p| (topic, p.clone()))
                        .ok_or(unknown),
                    Err(unknown) => Err(*unknown),
                };
                let read = match partition {
                    Ok((topic, p)) => {
                        let budget = Budget {
                            remaining: &mut remaining,
                        };
                        let read =
                            self.read_partition(topic, &p, position, params, budget, &mut pass);
                        if pass.would_block {
                            return pass;
                        }
                        if let PartitionRead::Records {
                            offsets, records, ..
                        } = &read
                        {
                            if params.is_follower() && record_position {
                                pass.followers.push(FollowerFetch {
                                    slot: (pass.result.topics.len(), reads.len()),
                                    partition: p.clone(),
                                    replica_id: params.replica_id,
                                    fetch_offset: position.fetch_offset,
                                    log_start_offset: position.log_start_offset,
                                    log_end_offset: offsets.log_end_offset,
                                    bytes: records.len(),
                                });
                            }
                        }
                        read
                    }
                    Err(error) => {
                        pass.answer_now = true;
                        PartitionRead::Failed {
                            error,
                            offsets: None,
                        }
                    }
                };
                reads.push((index, read));
            }
            pass.result.topics.push(reads);
        }
        pass
    }

    /// Reads one partition within the bytes the fetch has left, recording in `pass` what the
    /// fetch as a whole needs (bytes read, partitions to watch, whether to answer at once).
    fn read_partition(
        &self,
        topic: &Arc<Topic>,
        p: &Arc<Partition>,
        pos: FetchPosition,
        params: FetchParams,
        budget: Budget<'_>,
        pass: &mut Pass,
    ) -> PartitionRead {
        match self.check_fetchable(p, pos, params, pass) {
            Ok(offsets) => {
                let read = self.read_records(topic, p, pos, params, offsets, budget, pass);
                if matches!(
                    read,
                    PartitionRead::Records { .. } | PartitionRead::Remote { .. }
                ) {
                    pass.watched
                        .push((p.clone(), offsets.high_watermark, offsets.log_end_offset));
                } else {
                    pass.answer_now = true;
                }
                read
            }
            Err(refused) => {
                pass.answer_now = true;
                refused
            }
        }
    }

    /// Whether this replica may serve the fetch from `pos`: the fetcher's epoch, the role,
    /// and a diverging log. The partition's offsets when it may.
    fn check_fetchable(
        &self,
        p: &Partition,
        pos: FetchPosition,
        params: FetchParams,
        pass: &mut Pass,
    ) -> Result<PartitionOffsets, PartitionRead> {
        let epoch = p.leader_epoch();
        if pos.current_leader_epoch.0 >= 0 && pos.current_leader_epoch != epoch {
            let error = if pos.current_leader_epoch > epoch {
                ResponseError::UnknownLeaderEpoch
            } else {
                ResponseError::FencedLeaderEpoch
            };
            return Err(PartitionRead::Failed {
                error,
                offsets: None,
            });
        }
        let role = p.role();
        if role == Role::None || (params.only_from_leader && role != Role::Leader) {
            return Err(not_leader(p));
        }
        let offsets = p.offsets();
        // The common case needs no epoch lookup: the fetcher is in the leader's epoch.
        let in_current_epoch = role == Role::Leader
            && pos.last_fetched_epoch == epoch
            && pos.fetch_offset <= offsets.log_end_offset;
        if pos.last_fetched_epoch.0 >= 0 && !in_current_epoch {
            if pass.blocking == Blocking::Refused {
                // The epoch lookup takes the log lock.
                return Err(would_block(pass));
            }
            match diverging_epoch(p, pos.last_fetched_epoch, pos.fetch_offset, offsets) {
                Ok(None) => {}
                Ok(Some((epoch, end_offset))) => {
                    return Err(PartitionRead::Diverging {
                        offsets,
                        epoch,
                        end_offset,
                    })
                }
                Err(error) => return Err(failed(pass, error, offsets)),
            }
        }
        Ok(offsets)
    }

    /// Reads the records of a partition the fetcher may read, and records a follower's
    /// fetch state.
    #[allow(clippy::too_many_arguments)]
    fn read_records(
        &self,
        topic: &Arc<Topic>,
        p: &Arc<Partition>,
        pos: FetchPosition,
        params: FetchParams,
        offsets: PartitionOffsets,
        budget: Budget<'_>,
        pass: &mut Pass,
    ) -> PartitionRead {
        // KIP-73: a follower outside the ISR fetching a throttled replica gets no records
        // while this leader's replication throttle is exceeded.
        let throttled_replica = params.is_follower()
            && topic
                .config
                .leader_throttled
                .includes(p.index, self.config.node_id);
        if throttled_replica && pass.blocking == Blocking::Refused {
            // The ISR check takes the replica set lock.
            return would_block(pass);
        }
        let throttled = throttled_replica && !p.in_isr(params.replica_id);
        let throttle = &self.replication.throttles.leader;
        let held_back = throttled && throttle.is_exceeded(crate::clock::now_ms());
        let limit = if held_back {
            0
        } else {
            (pos.partition_max_bytes.max(0) as usize).min(*budget.remaining)
        };
        let min_one = pass.result.bytes == 0 && !held_back;
        // Followers read up to the log end; read_committed consumers stop at the last
        // stable offset, others at the high watermark.
        let max_offset = if params.is_follower() {
            offsets.log_end_offset
        } else if params.read_committed {
            offsets.last_stable_offset
        } else {
            offsets.high_watermark
        };
        let read = match pass.blocking {
            Blocking::Allowed => p.read(pos.fetch_offset, limit, max_offset, min_one),
            Blocking::Refused => match p.try_read(pos.fetch_offset, limit, max_offset, min_one) {
                Some(read) => read,
                None => return would_block(pass),
            },
        };
        let read = read.and_then(|s| match s {
            Some(slice) if slice.len >= SpliceBuf::MIN_SPLICE => Ok(Chunk::File(slice)),
            Some(slice) => slice.read().map(Chunk::Bytes).map_err(Into::into),
            None => Ok(Chunk::Bytes(Bytes::new())),
        });
        let mut remote = None;
        let records = match read {
            Ok(r) => r,
            // A follower below the leader's local log start does not copy the remote log
            // through the leader: it rebuilds its state from remote storage and starts at the
            // local log start (KIP-405, OFFSET_MOVED_TO_TIERED_STORAGE).
            Err(crate::log::ReadError::Remote { .. }) if params.is_follower() => {
                return failed(pass, ResponseError::OffsetMovedToTieredStorage, offsets);
            }
            Err(crate::log::ReadError::Remote { .. }) if params.tiered => {
                if !pass.remote {
                    pass.remote = true;
                    remote = Some(RemoteRead {
                        topic: topic.clone(),
                        partition: p.index,
                        offset: pos.fetch_offset,
                        max_bytes: limit,
                        min_one,
                        read_committed: params.read_committed,
                    });
                }
                Chunk::Bytes(Bytes::new())
            }
            Err(e) => {
                let error = e.code();
                if error == ResponseError::KafkaStorageError {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "fetch read failed");
                }
                return failed(pass, error, offsets);
            }
        };
        if throttled {
            pass.throttled_bytes += records.len();
        }
        *budget.remaining = budget.remaining.saturating_sub(records.len());
        pass.result.bytes += records.len();
        if let Some(read) = remote {
            return PartitionRead::Remote { offsets, read };
        }
        let aborted = if !params.read_committed {
            None
        } else if records.is_empty() {
            Some(Vec::new())
        } else {
            Some(p.aborted_transactions(pos.fetch_offset, max_offset))
        };
        PartitionRead::Records {
            offsets,
            records,
            aborted,
        }
    }
}

/// A failed read of an existing partition, counted in the fetch error metrics.
fn failed(pass: &mut Pass, error: ResponseError, offsets: PartitionOffsets) -> PartitionRead {
    pass.errors.push(error);
    PartitionRead::Failed {
        error,
        offsets: Some(offsets),
    }
}

/// Stops a [`Blocking::Refused`] pass; the read it returns is never answered.
fn would_block(pass: &mut Pass) -> PartitionRead {
    pass.would_block = true;
    PartitionRead::Failed {
        error: ResponseError::UnknownServerError,
        offsets: None,
    }
}

/// What a pass has left to give, in bytes.
struct Budget<'a> {
    remaining: &'a mut usize,
}

fn not_leader(p: &Partition) -> PartitionRead {
    let (leader, epoch) = p.leader_and_epoch();
    PartitionRead::NotLeader { leader, epoch }
}

/// KIP-320 on the leader (Kafka's `Partition.readRecords`): when the fetcher's last fetched
/// epoch ends before its fetch offset here, or is unknown here, the (epoch, end offset) of
/// the largest epoch both have, so it truncates. Blocking (takes the log lock).
fn diverging_epoch(
    p: &Partition,
    last_fetched_epoch: LeaderEpoch,
    fetch_offset: Offset,
    offsets: PartitionOffsets,
) -> Result<Option<(LeaderEpoch, Offset)>, ResponseError> {
    let (epoch, end_offset) = p.end_offset_for_epoch(last_fetched_epoch);
    if epoch.0 < 0 || end_offset.0 < 0 {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if fetch_offset < offsets.log_start_offset {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if epoch < last_fetched_epoch || end_offset < fetch_offset {
        return Ok(Some((epoch, end_offset)));
    }
    Ok(None)
}
