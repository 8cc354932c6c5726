//! ShareFetch (KIP-932): a share consumer's acknowledgements of what it was given, then the
//! records it acquires next, from the share-partitions of its share session.
//!
//! The acknowledgements are applied and persisted first (each partition answers with its
//! `acknowledge_error_code`). Then each share-partition is read from its next fetch offset
//! through the ordinary fetch path (which waits for new records up to `max_wait_ms`), and the
//! available records of what was read are acquired for the member. When nothing could be
//! acquired because other members hold every record in flight, the fetch waits, within
//! `max_wait_ms`, for records to be released.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{RequestKind, ResponseKind, ShareFetchRequest, ShareFetchResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::errors;
use crate::api::gate::{Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::{
    FetchLimits, FetchParams, FetchPosition, FetchTopic, PartitionRead, RemoteRead,
};
use crate::broker::{LeaderEpoch, Offset, Topic, TopicRef};
use crate::config::group::ShareSettings;
use crate::log::txn_index::AbortedTxn;
use crate::protocol::Chunk;
use crate::security::acl::Operation as Op;
use crate::services::Services;
use crate::share::session::{Begun, INITIAL_EPOCH};
use crate::tiering::Tiering;

/// One partition's acknowledgement batches: (first offset, last offset, types).
pub type Acks = Vec<(i64, i64, Vec<i8>)>;

/// What one share-partition answers.
#[derive(Default)]
struct Answer {
    error: Option<ResponseError>,
    ack_error: Option<ResponseError>,
    records: Option<Bytes>,
    acquired: Vec<AcquiredRecords>,
    leader: Option<(i32, i32)>,
}

fn top_level(code: ResponseError, message: Option<&str>) -> ShareFetchResponse {
    ShareFetchResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(|m| StrBytes::from_string(m.to_string())))
}

/// Applies each partition's acknowledgements of `member` (persisted before this returns).
/// `renew`: the request's version allows RENEW (v2).
pub(crate) async fn acknowledge_all(
    s: &Services,
    group: &str,
    member: &str,
    acks: BTreeMap<(Uuid, i32), Acks>,
    renew: bool,
) -> BTreeMap<(Uuid, i32), Option<ResponseError>> {
    let shares = s.shares.clone();
    let broker = s.broker.clone();
    let (group, member) = (group.to_string(), member.to_string());
    let done = crate::api::blocking(move || {
        acks.into_iter()
            .map(|((id, partition), batches)| {
                let result = match broker.topic_by_id(&id) {
                    None => Err(ResponseError::UnknownTopicId),
                    Some(topic) => {
                        shares.acknowledge(&group, &member, &topic, partition, &batches, renew)
                    }
                };
                ((id, partition), result.err())
            })
            .collect()
    })
    .await;
    done.unwrap_or_else(|e| {
        tracing::error!(error = %e, "share acknowledgement task failed");
        BTreeMap::new()
    })
}

/// A share request's (group, member), or `None` for Kafka's INVALID_REQUEST (answered
/// without a message): a null group id, or a null or empty member id. An empty group id is a
/// group id.
pub(crate) fn session_key(
    group: Option<&kafka_protocol::messages::GroupId>,
    member: Option<&StrBytes>,
) -> Option<(String, String)> {
    let (group, member) = (group?, member?);
    (!member.is_empty()).then(|| (group.0.to_string(), member.to_string()))
}

pub async fn handle(
    s: &Services,
    ctx: &Context,
    req: ShareFetchRequest,
    version: i16,
) -> ShareFetchResponse {
    let Some((group, member)) = session_key(req.group_id.as_ref(), req.member_id.as_ref()) else {
        return top_level(ResponseError::InvalidRequest, None);
    };
    let mut added = Vec::new();
    let mut acks: BTreeMap<(Uuid, i32), Acks> = BTreeMap::new();
    let mut partition_max_bytes: BTreeMap<(Uuid, i32), i32> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            let key = (t.topic_id, p.partition_index);
            added.push(key);
            partition_max_bytes.insert(key, p.partition_max_bytes);
            if !p.acknowledgement_batches.is_empty() {
                acks.entry(key).or_default().extend(
                    p.acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
            }
        }
    }
    let forgotten: Vec<(Uuid, i32)> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |&p| (t.topic_id, p)))
        .collect();
    if req.share_session_epoch == INITIAL_EPOCH && !acks.is_empty() {
        return top_level(ResponseError::InvalidRequest, None);
    }
    // Partitions of topics the client may not READ: neither acknowledged nor fetched.
    let who = s.broker.authorizer.is_enabled().then(|| Who {
        broker: s.broker.clone(),
        principal: ctx.principal.clone(),
        host: ctx.peer.ip().to_string(),
    });
    let readable = |id: &Uuid| who.as_ref().is_none_or(|w| w.may_topic(Op::Read, "", id));
    let begun = s
        .shares
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .begin(
            (group.clone(), member.clone()),
            req.share_session_epoch,
            &added,
            &forgotten,
            ctx.peer,
        );
    let session_partitions = match begun {
        Err(e) => return top_level(e, None),
        Ok(b) => b,
    };
    let mut answers: BTreeMap<(Uuid, i32), Answer> = BTreeMap::new();
    let (acks, refused_acks): (BTreeMap<_, _>, BTreeMap<_, _>) =
        acks.into_iter().partition(|((id, _), _)| readable(id));
    for key in refused_acks.into_keys() {
        let a = answers.entry(key).or_default();
        a.ack_error = Some(TOPIC_DENIED);
    }
    for (key, error) in acknowledge_all(s, &group, &member, acks, version >= 2).await {
        let a = answers.entry(key).or_default();
        a.ack_error = error;
    }
    let partitions = match session_partitions {
        Begun::Closed => {
            let shares = s.shares.clone();
            let (g, m) = (group.clone(), member.clone());
            let _ = crate::api::blocking(move || shares.release_member(&g, &m)).await;
            Vec::new()
        }
        Begun::Open(p) => p,
    };
    let (partitions, refused): (Vec<_>, Vec<_>) =
        partitions.into_iter().partition(|(id, _)| readable(id));
    for key in refused {
        let a = answers.entry(key).or_default();
        a.error = Some(TOPIC_DENIED);
        a.records = Some(Bytes::new());
    }
    let settings = s.shares.settings(&group);
    // A renewal (v2) acquires nothing new.
    if !partitions.is_empty() && !req.is_renew_ack {
        let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
        let member: Arc<str> = Arc::from(member.as_str());
        loop {
            // Registered before reading, so a release during the read is not missed.
            let released = s.shares.available.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let acquired = fetch_once(
                s,
                &group,
                &member,
                &partitions,
                &partition_max_bytes,
                &req,
                &settings,
                deadline,
                &mut answers,
            )
            .await;
            let left = deadline.saturating_duration_since(Instant::now());
            if acquired || left.is_zero() || answers.values().any(|a| a.error.is_some()) {
                break;
            }
            if tokio::time::timeout(left, released).await.is_err() {
                break;
            }
        }
    }
    let mut topics: Vec<ShareFetchableTopicResponse> = Vec::new();
    for ((id, partition), a) in answers {
        if topics.last().is_none_or(|t| t.topic_id != id) {
            topics.push(ShareFetchableTopicResponse::default().with_topic_id(id));
        }
        let (leader, epoch) = a.leader.unwrap_or((-1, -1));
        let data = PartitionData::default()
            .with_partition_index(partition)
            .with_error_code(a.error.map_or(0, |e| e.code()))
            .with_acknowledge_error_code(a.ack_error.map_or(0, |e| e.code()))
            .with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(leader)
                    .with_leader_epoch(epoch),
            )
            .with_records(Some(a.records.unwrap_or_default()))
            .with_acquired_records(a.acquired);
        if let Some(t) = topics.last_mut() {
            t.partitions.push(data);
        }
    }
    let lock_ms = settings.record_lock_duration_ms.clamp(0, i32::MAX as i64) as i32;
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(topics)
}

/// One read of the session's share-partitions and the acquisition of what it found. Returns
/// whether anything was acquired.
#[allow(clippy::too_many_arguments)]
async fn fetch_once(
    s: &Services,
    group: &str,
    member: &Arc<str>,
    partitions: &[(Uuid, i32)],
    partition_max_bytes: &BTreeMap<(Uuid, i32), i32>,
    req: &ShareFetchRequest,
    settings: &ShareSettings,
    deadline: Instant,
    answers: &mut BTreeMap<(Uuid, i32), Answer>,
) -> bool {
    let Some(positions) = fetch_positions(s, group, partitions, settings).await else {
        return false;
    };
    let mut wanted: Vec<FetchTopic> = Vec::new();
    let mut topics: Vec<Arc<Topic>> = Vec::new();
    for ((id, partition), at) in positions {
        match at {
            Err(e) => answers.entry((id, partition)).or_default().error = Some(e),
            Ok(None) => {}
            Ok(Some((topic, offset))) => {
                if wanted.last().is_none_or(|w| w.topic != TopicRef::Id(id)) {
                    wanted.push(FetchTopic {
                        topic: TopicRef::Id(id),
                        partitions: Vec::new(),
                    });
                    topics.push(topic);
                }
                let max = partition_max_bytes
                    .get(&(id, partition))
                    .copied()
                    .filter(|&m| m > 0)
                    .unwrap_or(req.max_bytes);
                if let Some(w) = wanted.last_mut() {
                    w.partitions.push((
                        partition,
                        FetchPosition {
                            fetch_offset: offset,
                            partition_max_bytes: max,
                            current_leader_epoch: LeaderEpoch(-1),
                            last_fetched_epoch: LeaderEpoch(-1),
                            log_start_offset: Offset(-1),
                        },
                    ));
                }
            }
        }
    }
    if wanted.is_empty() {
        return false;
    }
    let params = FetchParams {
        replica_id: -1,
        only_from_leader: true,
        read_committed: settings.read_committed,
        tiered: s.tiering.is_some(),
    };
    let max_bytes = (req.max_bytes.max(0) as usize).min(s.broker.config.fetch_max_bytes);
    let limits = FetchLimits {
        max_bytes,
        min_bytes: (req.min_bytes.max(0) as usize).min(max_bytes),
        max_wait: deadline.saturating_duration_since(Instant::now()),
    };
    let fetched = match s.broker.fetch(Arc::new(wanted), params, limits).await {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "share fetch read failed");
            return false;
        }
    };
    let max_records = if req.max_records > 0 {
        req.max_records as usize
    } else {
        usize::MAX
    };
    // Kafka's acquire modes (v2): 0 batch-optimized (whole batches, the v1 behaviour), 1 the
    // record limit exactly.
    let whole_batches = req.share_acquire_mode != 1;
    let mut any = false;
    for (topic, reads) in topics.iter().zip(fetched.topics) {
        for (index, read) in reads {
            let key = (topic.id, index);
            let got = match read {
                PartitionRead::Records {
                    records, aborted, ..
                } => materialize(records).await.map(|b| (b, aborted)),
                PartitionRead::Remote { offsets, read } => {
                    let upper = offsets.last_stable_offset.0;
                    remote(s.tiering.as_deref(), &read, upper, settings.read_committed).await
                }
                PartitionRead::NotLeader { leader, epoch } => {
                    let a = answers.entry(key).or_default();
                    a.error = Some(ResponseError::NotLeaderOrFollower);
                    a.leader = Some((leader.unwrap_or(-1), epoch.0));
                    continue;
                }
                PartitionRead::Failed { error, .. } => Err(error),
                PartitionRead::Diverging { .. } => continue,
            };
            let (records, aborted) = match got {
                Ok(r) => r,
                Err(e) => {
                    answers.entry(key).or_default().error = Some(e);
                    continue;
                }
            };
            let acquired = acquire_read(
                s,
                group,
                member,
                topic,
                index,
                records,
                aborted,
                (max_records, whole_batches),
                settings,
            )
            .await;
            match acquired {
                Ok(Some((acquired, bytes))) => {
                    any = true;
                    let a = answers.entry(key).or_default();
                    a.records = Some(bytes);
                    a.acquired = acquired;
                }
                Ok(None) => {}
                Err(e) => answers.entry(key).or_default().error = Some(e),
            }
        }
    }
    any
}

/// Where each share-partition reads from, or `None` when nothing can be acquired there now
/// (blocking: a first use may persist its start). `None` when the task failed.
async fn fetch_positions(
    s: &Services,
    group: &str,
    partitions: &[(Uuid, i32)],
    settings: &ShareSettings,
) -> Option<Vec<Position>> {
    let shares = s.shares.clone();
    let broker = s.broker.clone();
    let (group, partitions, settings) = (group.to_string(), partitions.to_vec(), settings.clone());
    let positions = crate::api::blocking(move || {
        partitions
            .into_iter()
            .map(|(id, partition)| {
                let at = match broker.topic_by_id(&id) {
                    None => Err(ResponseError::UnknownTopicId),
                    Some(t) => shares
                        .fetch_offset(&group, &t, partition, &settings)
                        .map(|o| o.map(|o| (t, o))),
                };
                ((id, partition), at)
            })
            .collect::<Vec<_>>()
    })
    .await;
    positions
        .inspect_err(|e| tracing::error!(error = %e, "share fetch task failed"))
        .ok()
}

/// A share-partition and where it reads from, if anywhere.
type Position = (
    (Uuid, i32),
    Result<Option<(Arc<Topic>, Offset)>, ResponseError>,
);

/// Acquires for `member` what was read from `topic`'s partition `index`: the acquired ranges
/// and the batches that hold them, or `None` when nothing could be acquired. `limit`: the
/// request's max records and whether whole batches may exceed it.
#[allow(clippy::too_many_arguments)]
async fn acquire_read(
    s: &Services,
    group: &str,
    member: &Arc<str>,
    topic: &Arc<Topic>,
    index: i32,
    records: Bytes,
    aborted: Option<Vec<AbortedTxn>>,
    (max_records, whole_batches): (usize, bool),
    settings: &ShareSettings,
) -> Result<Option<(Vec<AcquiredRecords>, Bytes)>, ResponseError> {
    let shares = s.shares.clone();
    let (group, member, topic, settings) = (
        group.to_string(),
        member.clone(),
        topic.clone(),
        settings.clone(),
    );
    let took = crate::api::blocking(move || {
        shares.acquire(
            &group,
            &member,
            &topic,
            index,
            &records,
            aborted.as_deref(),
            max_records,
            whole_batches,
            &settings,
        )
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "share acquisition task failed");
        errors::internal()
    })??;
    let (acquired, bytes) = took;
    if acquired.is_empty() {
        return Ok(None);
    }
    let acquired = acquired
        .into_iter()
        .map(|r| {
            AcquiredRecords::default()
                .with_first_offset(r.first_offset)
                .with_last_offset(r.last_offset)
                .with_delivery_count(r.delivery_count)
        })
        .collect();
    Ok(Some((acquired, bytes)))
}

/// The bytes of a local read (a file range is read here: acquisition needs the batch
/// headers).
async fn materialize(records: Chunk) -> Result<Bytes, ResponseError> {
    match records {
        Chunk::Bytes(b) => Ok(b),
        Chunk::File(slice) => match crate::api::blocking(move || slice.read()).await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "share fetch read failed");
                Err(ResponseError::KafkaStorageError)
            }
            Err(_) => Err(errors::internal()),
        },
    }
}

/// A read left to remote storage, with its aborted transactions under read_committed.
async fn remote(
    tiering: Option<&Tiering>,
    read: &RemoteRead,
    upper: i64,
    read_committed: bool,
) -> Result<(Bytes, Option<Vec<AbortedTxn>>), ResponseError> {
    let tiering = tiering.ok_or(ResponseError::OffsetOutOfRange)?;
    let bytes = tiering
        .read(
            &read.topic,
            read.partition,
            read.offset.0,
            read.max_bytes,
            read.min_one,
        )
        .await
        .map_err(|e| match e {
            crate::tiering::RemoteReadError::OutOfRange(_) => ResponseError::OffsetOutOfRange,
            other => {
                tracing::warn!(error = %other, "remote share fetch failed");
                ResponseError::KafkaStorageError
            }
        })?
        // Share fetches look into the batches they hand out: the bytes, not file ranges.
        .into_bytes()
        .map_err(|e| {
            tracing::warn!(error = %e, "remote cache file unreadable");
            ResponseError::KafkaStorageError
        })?;
    if !read_committed {
        return Ok((bytes, None));
    }
    let aborted = tiering
        .aborted_transactions(&read.topic, read.partition, read.offset.0, upper)
        .await
        .map_err(|_| ResponseError::KafkaStorageError)?;
    let mut all: Vec<AbortedTxn> = aborted
        .into_iter()
        .map(|(producer_id, first_offset)| AbortedTxn {
            producer_id,
            first_offset,
            last_offset: 0,
            last_stable_offset: 0,
        })
        .collect();
    if let Some(p) = read.topic.partitions.get(read.partition as usize) {
        all.extend(p.aborted_transactions(read.offset, Offset(upper)));
    }
    Ok((bytes, Some(all)))
}

/// ShareFetch: READ on the group and on every topic.
pub struct ShareFetch;

impl Api for ShareFetch {
    type Request = ShareFetchRequest;

    fn authorize(who: &Who, r: ShareFetchRequest, _version: i16) -> Gate {
        let group = r
            .group_id
            .as_ref()
            .map(|g| g.0.to_string())
            .unwrap_or_default();
        if !who.may_use_group(&group) {
            return Gate::Answer(ResponseKind::ShareFetch(top_level(GROUP_DENIED, None)));
        }
        // Topic READ is checked by the handler, per partition of the share session: a
        // refused partition stays in the session (as in Kafka) and is refused at every fetch.
        Gate::Run(RequestKind::ShareFetch(r), None)
    }

    async fn handle(s: &Services, ctx: &Context, r: ShareFetchRequest, version: i16) -> Outcome {
        Outcome::respond(handle(s, ctx, r, version).await)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic as Topic};
    use kafka_protocol::messages::GroupId;

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, who};
    use crate::security::acl::ResourceType as Res;

    fn request(group: &str, topics: &[Uuid]) -> ShareFetchRequest {
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_string(group.into()))))
            .with_member_id(Some(StrBytes::from_static_str("m")))
            .with_topics(
                topics
                    .iter()
                    .map(|id| {
                        Topic::default()
                            .with_topic_id(*id)
                            .with_partitions(vec![FetchPartition::default()])
                    })
                    .collect(),
            )
    }

    #[test]
    fn share_fetch_needs_read_on_the_group_before_the_handler_runs() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Read, Res::Group, "mine"),
                allow("User:alice", Op::Read, Res::Topic, "jobs"),
                allow("User:alice", Op::Describe, Res::Topic, "secret"),
            ],
        );
        let jobs = broker
            .create_topic("jobs", 1, 1, BTreeMap::new())
            .unwrap()
            .id;
        let secret = broker
            .create_topic("secret", 1, 1, BTreeMap::new())
            .unwrap()
            .id;
        let alice = who(&broker, "User:alice");
        let Gate::Answer(ResponseKind::ShareFetch(refused)) =
            ShareFetch::authorize(&alice, request("theirs", &[jobs]), 2)
        else {
            panic!("a group without READ is refused before the handler runs")
        };
        assert_eq!(refused.error_code, GROUP_DENIED.code());
        // Topics are checked by the handler, against the share session's partitions (a
        // refused one stays in the session): tests/interop/test_share_group_acls.py.
        let Gate::Run(RequestKind::ShareFetch(run), None) =
            ShareFetch::authorize(&alice, request("mine", &[jobs, secret]), 2)
        else {
            panic!("a group with READ runs")
        };
        assert_eq!(run.topics.len(), 2);
        assert!(alice.may_topic(Op::Read, "", &jobs));
        assert!(
            !alice.may_topic(Op::Read, "", &secret),
            "DESCRIBE is not READ"
        );
    }
}
