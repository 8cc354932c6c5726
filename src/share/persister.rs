//! How a share-partition leader reads and writes its durable state (Kafka's
//! `DefaultStatePersister`): through the share coordinator of the state's key, which is this
//! broker's [`ShareCoordinator`] when it leads the key's `__share_group_state` partition (always
//! on a single node) and another broker's otherwise, reached with the share-group state APIs
//! over the inter-broker listener.
//!
//! A coordinator that moved, is loading or is not elected yet is retried until
//! [`PERSIST_TIMEOUT`]; fencing errors (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH) and the
//! coordinator's other refusals are returned at once. In cluster mode the first use asks the
//! quorum for `__share_group_state` (as FindCoordinator does for the other coordinator topics).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    delete_share_group_state_request as del, initialize_share_group_state_request as init,
    read_share_group_state_request as read, read_share_group_state_summary_request as summary,
    write_share_group_state_request as write, DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest, ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest, WriteShareGroupStateRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::coordinator::{ShareCoordinator, StateWrite};
use super::partition::{Snapshot, StateBatch};
use super::state_record::StateKey;
use crate::broker::Broker;
use crate::controller::ClusterControl;
use crate::coordinator::internal_topics::{self, SHARE_STATE_TOPIC};

/// How long a state operation waits for a coordinator to become available.
pub const PERSIST_TIMEOUT: Duration = Duration::from_secs(15);
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// The versions this broker sends (Kafka 4.4's).
const INITIALIZE_VERSION: i16 = 0;
const READ_VERSION: i16 = 0;
const WRITE_VERSION: i16 = 1;
const DELETE_VERSION: i16 = 0;
const SUMMARY_VERSION: i16 = 1;

pub struct Persister {
    broker: Arc<Broker>,
    local: Arc<ShareCoordinator>,
    /// Cluster mode: the quorum, to create `__share_group_state` on first use.
    cluster: OnceLock<Arc<ClusterControl>>,
}

/// Where a key's coordinator is now.
enum Location {
    Local,
    Remote(i32),
    Unavailable,
}

fn retriable(e: ResponseError) -> bool {
    matches!(
        e,
        ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotLeaderOrFollower
            | ResponseError::RequestTimedOut
    )
}

/// A partition's error code with its message, as the share-partition leader's error.
fn partition_error(code: i16) -> Result<(), ResponseError> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

fn unexpected() -> ResponseError {
    ResponseError::UnknownServerError
}

impl Persister {
    pub fn new(broker: Arc<Broker>, local: Arc<ShareCoordinator>) -> Persister {
        Persister {
            broker,
            local,
            cluster: OnceLock::new(),
        }
    }

    /// Cluster mode: the quorum that creates `__share_group_state`.
    pub fn set_cluster(&self, control: Arc<ClusterControl>) {
        let _ = self.cluster.set(control);
    }

    pub fn coordinator(&self) -> &Arc<ShareCoordinator> {
        &self.local
    }

    fn locate(&self, key: &StateKey) -> Location {
        let broker = &self.broker;
        if broker.topic(SHARE_STATE_TOPIC).is_none() {
            if broker.config.cluster.is_none() {
                return Location::Local;
            }
            if let Some(c) = self.cluster.get() {
                if let Some(spec) = internal_topics::spec(&broker.config, SHARE_STATE_TOPIC, true) {
                    c.request_internal_topic(spec);
                }
            }
            return Location::Unavailable;
        }
        let Some(index) = self.local.index_of(key) else {
            return Location::Unavailable;
        };
        match broker.replication().leadership(SHARE_STATE_TOPIC, index) {
            None if broker.config.cluster.is_none() => Location::Local,
            None => Location::Unavailable,
            Some(state) => match state.leader {
                Some(id) if id == broker.config.node_id => Location::Local,
                Some(id) => Location::Remote(id),
                None => Location::Unavailable,
            },
        }
    }

    /// Runs `op` against the key's coordinator, here or on another broker, retrying while it
    /// is not available. Blocking.
    fn run<T>(
        &self,
        key: &StateKey,
        local: impl Fn(&ShareCoordinator) -> Result<T, ResponseError>,
        remote: impl Fn(&str, u16) -> Result<T, ResponseError>,
    ) -> Result<T, ResponseError> {
        let deadline = Instant::now() + PERSIST_TIMEOUT;
        loop {
            let result = match self.locate(key) {
                Location::Local => local(&self.local),
                Location::Remote(id) => {
                    match crate::replication::fetcher::leader_address(&self.broker, id) {
                        Some((host, port)) => remote(&host, port),
                        None => Err(ResponseError::CoordinatorNotAvailable),
                    }
                }
                Location::Unavailable => Err(ResponseError::CoordinatorNotAvailable),
            };
            match result {
                Err(e) if retriable(e) && Instant::now() < deadline => {
                    std::thread::sleep(RETRY_BACKOFF);
                }
                other => return other,
            }
        }
    }

    fn call<R: kafka_protocol::protocol::Request>(
        &self,
        (host, port): (&str, u16),
        version: i16,
        request: &R,
    ) -> Result<R::Response, ResponseError> {
        crate::broker::replica_manager::call_broker(
            &self.broker,
            (host, port),
            "share-persister",
            version,
            request,
        )
        .map_err(|e| {
            tracing::debug!(error = %e, "share state request to a coordinator failed");
            ResponseError::CoordinatorNotAvailable
        })
    }

    fn group(key: &StateKey) -> kafka_protocol::messages::GroupId {
        kafka_protocol::messages::GroupId(StrBytes::from_string(key.group.clone()))
    }

    /// The share-partition's state (`None`: never initialized), fencing leaders older than
    /// `leader_epoch`. Blocking.
    pub fn read(
        &self,
        key: &StateKey,
        leader_epoch: i32,
    ) -> Result<Option<Snapshot>, ResponseError> {
        self.run(
            key,
            |c| c.read(key, leader_epoch),
            |host, port| {
                let req = ReadShareGroupStateRequest::default()
                    .with_group_id(Self::group(key).0)
                    .with_topics(vec![read::ReadStateData::default()
                        .with_topic_id(key.topic_id)
                        .with_partitions(vec![read::PartitionData::default()
                            .with_partition(key.partition)
                            .with_leader_epoch(leader_epoch)])]);
                let resp = self.call((host, port), READ_VERSION, &req)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|r| r.partitions.first())
                    .ok_or_else(unexpected)?;
                // The coordinator's answer for a share-partition never initialized (the
                // request's epochs are never negative).
                if p.error_code == ResponseError::InvalidRequest.code() {
                    return Ok(None);
                }
                partition_error(p.error_code)?;
                Ok(Some(Snapshot {
                    snapshot_epoch: 0,
                    state_epoch: p.state_epoch,
                    leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: -1,
                    create_timestamp: crate::clock::now_ms(),
                    write_timestamp: crate::clock::now_ms(),
                    state_batches: p
                        .state_batches
                        .iter()
                        .map(|b| StateBatch {
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            delivery_state: b.delivery_state,
                            delivery_count: b.delivery_count,
                        })
                        .collect(),
                }))
            },
        )
    }

    /// Writes the share-partition's state. Blocking.
    pub fn write(&self, key: &StateKey, w: &StateWrite) -> Result<(), ResponseError> {
        self.run(
            key,
            |c| c.write(key, w),
            |host, port| {
                let req = WriteShareGroupStateRequest::default()
                    .with_group_id(Self::group(key).0)
                    .with_topics(vec![write::WriteStateData::default()
                        .with_topic_id(key.topic_id)
                        .with_partitions(vec![write::PartitionData::default()
                            .with_partition(key.partition)
                            .with_state_epoch(w.state_epoch)
                            .with_leader_epoch(w.leader_epoch)
                            .with_start_offset(w.start_offset)
                            .with_delivery_complete_count(w.delivery_complete_count)
                            .with_state_batches(
                                w.batches
                                    .iter()
                                    .map(|b| {
                                        write::StateBatch::default()
                                            .with_first_offset(b.first_offset)
                                            .with_last_offset(b.last_offset)
                                            .with_delivery_state(b.delivery_state)
                                            .with_delivery_count(b.delivery_count)
                                    })
                                    .collect(),
                            )])]);
                let resp = self.call((host, port), WRITE_VERSION, &req)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|r| r.partitions.first())
                    .ok_or_else(unexpected)?;
                partition_error(p.error_code)
            },
        )
    }

    /// Starts the share-partition over at `start_offset` with `state_epoch`. Blocking.
    pub fn initialize(
        &self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), ResponseError> {
        self.run(
            key,
            |c| c.initialize(key, state_epoch, start_offset),
            |host, port| {
                let req = InitializeShareGroupStateRequest::default()
                    .with_group_id(Self::group(key).0)
                    .with_topics(vec![init::InitializeStateData::default()
                        .with_topic_id(key.topic_id)
                        .with_partitions(vec![init::PartitionData::default()
                            .with_partition(key.partition)
                            .with_state_epoch(state_epoch)
                            .with_start_offset(start_offset)])]);
                let resp = self.call((host, port), INITIALIZE_VERSION, &req)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|r| r.partitions.first())
                    .ok_or_else(unexpected)?;
                partition_error(p.error_code)
            },
        )
    }

    /// Deletes the share-partition's state. Blocking.
    pub fn delete(&self, key: &StateKey) -> Result<(), ResponseError> {
        self.run(
            key,
            |c| c.delete(key),
            |host, port| {
                let req = DeleteShareGroupStateRequest::default()
                    .with_group_id(Self::group(key).0)
                    .with_topics(vec![del::DeleteStateData::default()
                        .with_topic_id(key.topic_id)
                        .with_partitions(vec![
                            del::PartitionData::default().with_partition(key.partition)
                        ])]);
                let resp = self.call((host, port), DELETE_VERSION, &req)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|r| r.partitions.first())
                    .ok_or_else(unexpected)?;
                partition_error(p.error_code)
            },
        )
    }

    /// The share-partition's start offset, state epoch, leader epoch and delivery-complete
    /// count (`None`: no state). Blocking.
    pub fn summary(&self, key: &StateKey) -> Result<Option<Summary>, ResponseError> {
        self.run(
            key,
            |c| Ok(c.summary(key)?.map(|s| Summary::of(&s))),
            |host, port| {
                let req = ReadShareGroupStateSummaryRequest::default()
                    .with_group_id(Self::group(key).0)
                    .with_topics(vec![summary::ReadStateSummaryData::default()
                        .with_topic_id(key.topic_id)
                        .with_partitions(vec![summary::PartitionData::default()
                            .with_partition(key.partition)
                            .with_leader_epoch(-1)])]);
                let resp = self.call((host, port), SUMMARY_VERSION, &req)?;
                let p = resp
                    .results
                    .first()
                    .and_then(|r| r.partitions.first())
                    .ok_or_else(unexpected)?;
                partition_error(p.error_code)?;
                Ok((p.start_offset >= 0).then_some(Summary {
                    start_offset: p.start_offset,
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    delivery_complete: p.delivery_complete_count.max(0) as i64,
                }))
            },
        )
    }
}

impl Persister {
    /// The summaries of many share-partitions (`None`: no state), with one request per
    /// coordinator broker, retried until `deadline` for those whose coordinator is not
    /// available. Blocking.
    pub fn summaries(
        &self,
        keys: Vec<StateKey>,
        deadline: Instant,
    ) -> Result<Vec<(StateKey, Option<Summary>)>, ResponseError> {
        let mut out = Vec::with_capacity(keys.len());
        let mut pending = keys;
        loop {
            let mut by_broker: std::collections::BTreeMap<i32, Vec<StateKey>> = Default::default();
            let mut retry = Vec::new();
            for key in pending {
                match self.locate(&key) {
                    Location::Local => match self.local.summary(&key) {
                        Ok(s) => out.push((key, s.as_ref().map(Summary::of))),
                        Err(e) if retriable(e) => retry.push(key),
                        Err(e) => return Err(e),
                    },
                    Location::Remote(id) => by_broker.entry(id).or_default().push(key),
                    Location::Unavailable => retry.push(key),
                }
            }
            for (id, keys) in by_broker {
                match self.remote_summaries(id, &keys) {
                    Ok(answers) => {
                        for (key, answer) in keys.into_iter().zip(answers) {
                            match answer {
                                Ok(s) => out.push((key, s)),
                                Err(e) if retriable(e) => retry.push(key),
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    Err(e) if retriable(e) => retry.extend(keys),
                    Err(e) => return Err(e),
                }
            }
            if retry.is_empty() {
                return Ok(out);
            }
            if Instant::now() >= deadline {
                return Err(ResponseError::CoordinatorNotAvailable);
            }
            std::thread::sleep(RETRY_BACKOFF);
            pending = retry;
        }
    }

    /// One ReadShareGroupStateSummary to broker `id` for `keys` (one group each, possibly
    /// several): the answers in the order of `keys`.
    #[allow(clippy::type_complexity)]
    fn remote_summaries(
        &self,
        id: i32,
        keys: &[StateKey],
    ) -> Result<Vec<Result<Option<Summary>, ResponseError>>, ResponseError> {
        let (host, port) = crate::replication::fetcher::leader_address(&self.broker, id)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let mut answers = std::collections::HashMap::new();
        let mut groups: std::collections::BTreeMap<&str, Vec<&StateKey>> = Default::default();
        for k in keys {
            groups.entry(k.group.as_str()).or_default().push(k);
        }
        for (group, ks) in groups {
            let mut topics: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> = Default::default();
            for k in &ks {
                topics.entry(k.topic_id).or_default().push(k.partition);
            }
            let req = ReadShareGroupStateSummaryRequest::default()
                .with_group_id(StrBytes::from_string(group.to_string()))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic_id, partitions)| {
                            summary::ReadStateSummaryData::default()
                                .with_topic_id(topic_id)
                                .with_partitions(
                                    partitions
                                        .into_iter()
                                        .map(|p| {
                                            summary::PartitionData::default()
                                                .with_partition(p)
                                                .with_leader_epoch(-1)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let resp = self.call((&host, port), SUMMARY_VERSION, &req)?;
            for t in &resp.results {
                for p in &t.partitions {
                    let answer = partition_error(p.error_code).map(|()| {
                        (p.start_offset >= 0).then_some(Summary {
                            start_offset: p.start_offset,
                            state_epoch: p.state_epoch,
                            leader_epoch: p.leader_epoch,
                            delivery_complete: p.delivery_complete_count.max(0) as i64,
                        })
                    });
                    answers.insert((group, t.topic_id, p.partition), answer);
                }
            }
        }
        Ok(keys
            .iter()
            .map(|k| {
                answers
                    .remove(&(k.group.as_str(), k.topic_id, k.partition))
                    .unwrap_or(Err(ResponseError::UnknownServerError))
            })
            .collect())
    }
}

/// What ReadShareGroupStateSummary answers for one share-partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub start_offset: i64,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// Records at or above the start offset whose delivery is complete.
    pub delivery_complete: i64,
}

impl Summary {
    /// The summary of a stored state: its leader's count of completed offsets, or when it
    /// never said one, the count of its batches' acknowledged and archived offsets.
    pub fn of(s: &Snapshot) -> Summary {
        let counted = || {
            s.state_batches
                .iter()
                .filter(|b| b.delivery_state != 0 && b.last_offset >= s.start_offset)
                .map(|b| {
                    b.last_offset
                        .saturating_sub(b.first_offset.max(s.start_offset))
                        .saturating_add(1)
                })
                .sum()
        };
        Summary {
            start_offset: s.start_offset,
            state_epoch: s.state_epoch,
            leader_epoch: s.leader_epoch,
            delivery_complete: if s.delivery_complete_count >= 0 {
                i64::from(s.delivery_complete_count)
            } else {
                counted()
            },
        }
    }
}
