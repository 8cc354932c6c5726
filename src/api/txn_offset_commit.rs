//! TxnOffsetCommit: offsets committed as part of a transaction. The group's offsets partition
//! must be in the transaction (KIP-890 verification, as Kafka's group coordinator does); the
//! offsets are written as a transactional batch and count once the COMMIT marker lands.
//!
//! In a cluster the transaction coordinator of the transactional id may be another broker
//! than this group coordinator: the verification is then an AddPartitionsToTxn (verify only)
//! to that broker, as Kafka's `AddPartitionsToTxnManager` sends it, and only for a producer
//! whose transaction has not yet written to the offsets partition.
//!
//! From v6 (Kafka 4.4) topics are named by id, resolved to names in the catalog as for
//! OffsetCommit v10: an unknown id answers UNKNOWN_TOPIC_ID for each of its partitions, and the
//! answer names the topics by the ids the request used.

use std::sync::Arc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    txn_offset_commit_request, RequestKind, ResponseKind, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use crate::api::add_offsets_to_txn::offsets_partition;
use crate::api::gate::{self, Gate, Who, TOPIC_DENIED};
use crate::api::offset_commit::topic_name;
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::txn::state_log::{ensure_in_transaction, TxnCheck};
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::{GroupCoordinator, OFFSETS_TOPIC};
use crate::security::acl::Operation as Op;
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    groups: &Arc<GroupCoordinator>,
    txns: &Arc<TransactionCoordinator>,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let (groups, txns) = (groups.clone(), txns.clone());
    let shape: Vec<(kafka_protocol::messages::TopicName, uuid::Uuid, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.topic_id,
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let respond = |errors: Vec<Option<ResponseError>>| {
        let mut it = errors.into_iter();
        TxnOffsetCommitResponse::default().with_topics(
            shape
                .iter()
                .map(|(name, id, parts)| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(name.clone())
                        .with_topic_id(*id)
                        .with_partitions(
                            parts
                                .iter()
                                .map(|&p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(
                                            it.next().flatten().map_or(0, |e| e.code()),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    let total: usize = shape.iter().map(|(_, _, p)| p.len()).sum();
    let group = req.group_id.0.to_string();
    let txn_id = req.transactional_id.0.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    // Only the group's coordinator takes the offsets (Kafka answers NOT_COORDINATOR before it
    // verifies anything: it is not the leader of the offsets partition).
    if let Err(e) = groups.check_coordinator(&group) {
        return respond(vec![Some(e); total]);
    }
    // The group's offsets partition must be in the transaction: added by AddOffsetsToTxn
    // (v4 and below), or by this commit (v5+, TV2 clients).
    let partition = offsets_partition(&broker, &group);
    let check = TxnCheck::for_txn_offset_commit(version);
    let verified = {
        let (broker, txns, txn_id) = (broker.clone(), txns.clone(), txn_id.clone());
        blocking(move || {
            let tp = (OFFSETS_TOPIC, partition);
            ensure_in_transaction(&broker, &txns, &txn_id, pid, epoch, tp, check)
        })
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError))
    };
    if let Err(e) = verified {
        tracing::debug!(group = %group, transactional_id = %txn_id, error = ?e, "transactional offset commit not verified");
        return respond(vec![Some(verification_error(e, version)); total]);
    }
    let mut slots: Vec<Option<ResponseError>> = Vec::with_capacity(total);
    let mut offsets = Vec::new();
    for t in &req.topics {
        let topic = topic_name(&broker, &t.name, t.topic_id, version >= 6);
        for p in &t.partitions {
            match &topic {
                Err(e) => slots.push(Some(*e)),
                Ok(name) if broker.partition(name, p.partition_index).is_some() => {
                    slots.push(None);
                    offsets.push((
                        name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_ref().map(|m| m.to_string()),
                    ));
                }
                Ok(_) => slots.push(Some(ResponseError::UnknownTopicOrPartition)),
            }
        }
    }
    if offsets.is_empty() {
        return respond(slots);
    }
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let generation = req.generation_id;
    let result = blocking(move || {
        groups.commit_txn_offsets(
            &group,
            &member,
            instance.as_deref(),
            generation,
            pid,
            epoch,
            offsets,
        )
    })
    .await;
    match result {
        Ok(Ok(answers)) => {
            let mut it = answers.into_iter();
            respond(
                slots
                    .iter()
                    .map(|s| if s.is_some() { *s } else { it.next().flatten() })
                    .collect(),
            )
        }
        Ok(Err(e)) => respond(vec![Some(e); total]),
        Err(_) => respond(vec![Some(ResponseError::UnknownServerError); total]),
    }
}

/// The answer to a failed verification, as Kafka's group coordinator gives it
/// (`AddPartitionsToTxnManager` and `CoordinatorOperationExceptionHelper`): a network failure
/// is retried without a coordinator lookup, and clients before v4 do not know
/// TRANSACTION_ABORTABLE.
fn verification_error(e: ResponseError, version: i16) -> ResponseError {
    match e {
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::TransactionAbortable if version < 4 => ResponseError::InvalidTxnState,
        ResponseError::NetworkException => ResponseError::CoordinatorLoadInProgress,
        ResponseError::UnknownTopicOrPartition
        | ResponseError::NotEnoughReplicas
        | ResponseError::RequestTimedOut => ResponseError::CoordinatorNotAvailable,
        ResponseError::NotLeaderOrFollower | ResponseError::KafkaStorageError => {
            ResponseError::NotCoordinator
        }
        e => e,
    }
}

/// TxnOffsetCommit: WRITE on the transactional id, READ on the group, then READ on each
/// topic (by its name when named by id; an unknown id passes, to be answered UNKNOWN_TOPIC_ID).
pub struct TxnOffsetCommit;

impl Api for TxnOffsetCommit {
    type Request = TxnOffsetCommitRequest;

    fn authorize(who: &Who, mut r: TxnOffsetCommitRequest, _version: i16) -> Gate {
        if let Some(code) = who.txn_group_refusal(&r.transactional_id, &r.group_id) {
            let topics = r.topics.iter().map(|t| refusal(t, code)).collect();
            return Gate::Answer(ResponseKind::TxnOffsetCommit(
                TxnOffsetCommitResponse::default().with_topics(topics),
            ));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may_topic(Op::Read, &t.name, &t.topic_id));
        r.topics = ok;
        let refusals = denied.iter().map(|t| refusal(t, TOPIC_DENIED)).collect();
        gate::run_and_extend(
            RequestKind::TxnOffsetCommit(r),
            refusals,
            |resp, mut extra| match resp {
                ResponseKind::TxnOffsetCommit(mut t) => {
                    t.topics.append(&mut extra);
                    ResponseKind::TxnOffsetCommit(t)
                }
                other => other,
            },
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: TxnOffsetCommitRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.groups, &s.txns, r, version).await)
    }
}

/// A refused topic: every partition with `code`.
fn refusal(
    t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic,
    code: ResponseError,
) -> TxnOffsetCommitResponseTopic {
    TxnOffsetCommitResponseTopic::default()
        .with_name(t.name.clone())
        .with_topic_id(t.topic_id)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code.code())
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::BytesMut;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, GroupId, InitProducerIdRequest, ProducerId, TopicName,
        TransactionalId,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use uuid::Uuid;

    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, services, who};
    use crate::security::acl::ResourceType as Res;

    fn topic(name: &str, id: Uuid, partitions: &[i32]) -> TxnOffsetCommitRequestTopic {
        TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_topic_id(id)
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(10 + i64::from(p))
                    })
                    .collect(),
            )
    }

    fn commit(
        txn: &str,
        (pid, epoch): (i64, i16),
        topics: Vec<TxnOffsetCommitRequestTopic>,
    ) -> TxnOffsetCommitRequest {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(txn.to_string())))
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(topics)
    }

    /// (name, id, partition, error code) of every partition answered.
    fn answers(r: &TxnOffsetCommitResponse) -> Vec<(String, Uuid, i32, i16)> {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.to_string(),
                        t.topic_id,
                        p.partition_index,
                        p.error_code,
                    )
                })
            })
            .collect()
    }

    #[test]
    fn the_codec_names_topics_up_to_v5_and_by_id_from_v6() {
        let id = Uuid::new_v4();
        let r = commit("tx", (1, 0), vec![topic("t", id, &[0])]);
        for (version, name, topic_id) in [(5, "t", Uuid::nil()), (6, "", id)] {
            let mut buf = BytesMut::new();
            r.encode(&mut buf, version).unwrap();
            assert_eq!(buf.len(), r.compute_size(version).unwrap());
            let back = TxnOffsetCommitRequest::decode(&mut buf.freeze(), version).unwrap();
            let t = &back.topics[0];
            assert_eq!(
                (t.name.as_str(), t.topic_id),
                (name, topic_id),
                "v{version}"
            );
            assert_eq!(t.partitions, r.topics[0].partitions);
        }
        let resp = TxnOffsetCommitResponse::default().with_topics(vec![
            TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_topic_id(id)
                .with_partitions(vec![TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(0)
                    .with_error_code(100)]),
        ]);
        for (version, name, topic_id) in [(5, "t", Uuid::nil()), (6, "", id)] {
            let mut buf = BytesMut::new();
            resp.encode(&mut buf, version).unwrap();
            assert_eq!(buf.len(), resp.compute_size(version).unwrap());
            let back = TxnOffsetCommitResponse::decode(&mut buf.freeze(), version).unwrap();
            let t = &back.topics[0];
            assert_eq!(
                (t.name.as_str(), t.topic_id),
                (name, topic_id),
                "v{version}"
            );
            assert_eq!(t.partitions, resp.topics[0].partitions);
        }
        assert!(r.encode(&mut BytesMut::new(), 7).is_err());
    }

    #[tokio::test]
    async fn v6_commits_by_topic_id_and_unknown_ids_get_unknown_topic_id() {
        let dir = tempfile::tempdir().unwrap();
        let s = services(dir.path());
        let t = s.broker.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
        let init = crate::api::init_producer_id::handle(
            s.broker.clone(),
            &s.txns,
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await;
        assert_eq!(init.error_code, 0, "{init:?}");
        let producer = (init.producer_id.0, init.producer_epoch);
        let added = crate::api::add_offsets_to_txn::handle(
            s.broker.clone(),
            &s.txns,
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_group_id(GroupId(StrBytes::from_static_str("g"))),
            4,
        )
        .await;
        assert_eq!(added.error_code, 0, "{added:?}");
        let stranger = Uuid::new_v4();
        let r = handle(
            s.broker.clone(),
            &s.groups,
            &s.txns,
            commit(
                "tx",
                producer,
                vec![topic("", t.id, &[0, 1, 4]), topic("", stranger, &[0])],
            ),
            6,
        )
        .await;
        assert_eq!(
            answers(&r),
            [
                (String::new(), t.id, 0, 0),
                (String::new(), t.id, 1, 0),
                (String::new(), t.id, 4, 3),
                (String::new(), stranger, 0, 100),
            ]
        );
        // Pending in the transaction, by name.
        let mut pending = s.groups.unstable_offsets("g");
        pending.sort();
        assert_eq!(pending, [("t".to_string(), 0), ("t".to_string(), 1)]);
    }

    #[test]
    fn topics_named_by_id_are_authorized_by_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Write, Res::TransactionalId, "tx"),
                allow("User:alice", Op::Read, Res::Group, "g"),
                allow("User:alice", Op::Read, Res::Topic, "allowed"),
            ],
        );
        let allowed = broker
            .create_topic("allowed", 1, 1, BTreeMap::new())
            .unwrap();
        let denied = broker
            .create_topic("denied", 1, 1, BTreeMap::new())
            .unwrap();
        let stranger = Uuid::new_v4();
        let req = commit(
            "tx",
            (1, 0),
            vec![
                topic("", allowed.id, &[0]),
                topic("", denied.id, &[0]),
                topic("", stranger, &[0]),
            ],
        );
        let Gate::Run(RequestKind::TxnOffsetCommit(run), Some(finish)) =
            TxnOffsetCommit::authorize(&who(&broker, "User:alice"), req, 6)
        else {
            panic!("a partial refusal runs the rest")
        };
        let ids: Vec<_> = run.topics.iter().map(|t| t.topic_id).collect();
        assert_eq!(ids, [allowed.id, stranger]);
        let Outcome::Respond(resp) = finish(Outcome::respond(TxnOffsetCommitResponse::default()))
        else {
            panic!("answered")
        };
        let ResponseKind::TxnOffsetCommit(resp) = *resp else {
            panic!("a TxnOffsetCommit answer")
        };
        assert_eq!(answers(&resp), [(String::new(), denied.id, 0, 29)]);
    }
}
