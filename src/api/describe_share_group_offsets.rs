//! DescribeShareGroupOffsets (KIP-932): each share-partition's start offset (the first record
//! not yet delivered and acknowledged), as `kafka-share-groups --describe` shows it.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as Group,
    DescribeShareGroupOffsetsResponsePartition as Partition,
    DescribeShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{self, Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;
use crate::share::ShareService;

/// Whether `group` is a share group with no members (`Ok(true)`), with members (`Ok(false)`),
/// or not a share group (GROUP_ID_NOT_FOUND; a share group exists while it has members or
/// share-partition state).
pub fn share_group_is_empty(
    groups: &GroupCoordinator,
    shares: &ShareService,
    group: &str,
) -> Result<bool, ResponseError> {
    groups.check_coordinator(group)?;
    match groups.group_type(group) {
        Some("share") => Ok(groups
            .with_share_group(group, |s| s.is_empty())
            .unwrap_or(true)),
        Some(_) => Err(ResponseError::GroupIdNotFound),
        None if shares.knows_group(group) => Ok(true),
        None => Err(ResponseError::GroupIdNotFound),
    }
}

/// Kafka's messages for a group whose share offsets cannot change.
pub fn not_a_share_group(group: &str) -> String {
    format!("Group {group} is not a share group.")
}

/// Refuses to change the offsets of a share group with members (NON_EMPTY_GROUP), of a group
/// that is not a share group, or (unless `create`, AlterShareGroupOffsets) of a group that does
/// not exist, with Kafka's messages; `None` when they may change, the group then being an
/// empty share group.
pub fn refuse_offset_change(
    groups: &GroupCoordinator,
    shares: &ShareService,
    group: &str,
    create: bool,
) -> Option<(ResponseError, Option<String>)> {
    let refusal = match share_group_is_empty(groups, shares, group) {
        Ok(true) => None,
        Err(ResponseError::GroupIdNotFound) if groups.group_type(group).is_some() => Some((
            ResponseError::GroupIdNotFound,
            Some(not_a_share_group(group)),
        )),
        Err(ResponseError::GroupIdNotFound) if create => None,
        Err(ResponseError::GroupIdNotFound) => Some((
            ResponseError::GroupIdNotFound,
            Some(format!("Group {group} not found.")),
        )),
        Err(e) => Some((e, None)),
        Ok(false) => Some((
            ResponseError::NonEmptyGroup,
            Some("The group is not empty.".to_string()),
        )),
    };
    if refusal.is_some() {
        return refusal;
    }
    // The group stays (empty) when its last offsets are deleted, as in Kafka.
    groups.ensure_share_group(group).err().map(|e| (e, None))
}

/// The message of an unknown topic or partition in a share offsets request.
pub const UNKNOWN_PARTITION: &str = "This server does not host this topic-partition.";

/// Blocking (reads share-partition state under its lock).
pub fn handle(
    broker: &Broker,
    groups: &Arc<GroupCoordinator>,
    shares: &ShareService,
    req: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let described = req
        .groups
        .into_iter()
        .map(|g| {
            let id = g.group_id.0.to_string();
            let base = Group::default().with_group_id(g.group_id.clone());
            // As Kafka: a group that is not a share group (or none) has no share offsets,
            // which is not an error.
            match share_group_is_empty(groups, shares, &id) {
                Ok(_) | Err(ResponseError::GroupIdNotFound) => {}
                Err(e) => return base.with_error_code(e.code()),
            }
            let offsets = shares.start_offsets(&id);
            // The requested topics, or every topic the group has state of.
            let wanted: Vec<(String, Vec<i32>)> = match g.topics {
                Some(topics) => topics
                    .into_iter()
                    .map(|t| (t.topic_name.0.to_string(), t.partitions))
                    .collect(),
                None => {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (topic_id, partition) in offsets.keys() {
                        if let Some(t) = broker.topic_by_id(topic_id) {
                            by_topic.entry(t.name.clone()).or_default().push(*partition);
                        }
                    }
                    by_topic
                        .into_iter()
                        .map(|(t, mut ps)| {
                            ps.sort_unstable();
                            (t, ps)
                        })
                        .collect()
                }
            };
            let topics = wanted
                .into_iter()
                .map(|(name, partitions)| {
                    let topic = broker.topic(&name);
                    let partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let base = Partition::default().with_partition_index(p);
                            let Some(t) = topic.as_ref() else {
                                return base
                                    .with_start_offset(-1)
                                    .with_leader_epoch(-1)
                                    .with_error_code(
                                        ResponseError::UnknownTopicOrPartition.code(),
                                    );
                            };
                            match offsets.get(&(t.id, p)) {
                                Some(&(start, epoch, done)) => {
                                    // KIP-1226: the records from the start offset to the high
                                    // watermark not yet delivered and acknowledged.
                                    let mut part =
                                        base.with_start_offset(start).with_leader_epoch(epoch);
                                    if let Some(tp) = t.partitions.get(p as usize) {
                                        let hw = tp.offsets().high_watermark.0;
                                        part.lag = (hw - start - done).max(0);
                                    }
                                    part
                                }
                                // Never fetched by this group: not initialized.
                                None => base.with_start_offset(-1).with_leader_epoch(0),
                            }
                        })
                        .collect();
                    Topic::default()
                        .with_topic_name(TopicName(StrBytes::from_string(name)))
                        .with_topic_id(topic.map(|t| t.id).unwrap_or_default())
                        .with_partitions(partitions)
                })
                .collect();
            base.with_topics(topics)
        })
        .collect();
    DescribeShareGroupOffsetsResponse::default().with_groups(described)
}

/// DescribeShareGroupOffsets: DESCRIBE on the group and on each topic.
pub struct DescribeShareGroupOffsets;

impl Api for DescribeShareGroupOffsets {
    type Request = DescribeShareGroupOffsetsRequest;

    fn authorize(who: &Who, r: DescribeShareGroupOffsetsRequest, _version: i16) -> Gate {
        let who = who.clone();
        // Groups asked for all their topics: those the client may not describe are left out.
        let all_topics: std::collections::HashSet<String> = r
            .groups
            .iter()
            .filter(|g| g.topics.is_none())
            .map(|g| g.group_id.to_string())
            .collect();
        Gate::Run(
            RequestKind::DescribeShareGroupOffsets(r),
            gate::finish(move |resp| match resp {
                ResponseKind::DescribeShareGroupOffsets(mut d) => {
                    for g in d.groups.iter_mut() {
                        if !who.may(Op::Describe, Res::Group, &g.group_id) {
                            // Kafka refuses the group without a message.
                            *g = Group::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(GROUP_DENIED.code());
                            continue;
                        }
                        if all_topics.contains(g.group_id.as_str()) {
                            g.topics
                                .retain(|t| who.may(Op::Describe, Res::Topic, &t.topic_name));
                        }
                        for t in g.topics.iter_mut() {
                            if !who.may(Op::Describe, Res::Topic, &t.topic_name) {
                                // As Kafka: no topic id, and the schema's defaults otherwise.
                                t.topic_id = uuid::Uuid::nil();
                                for p in t.partitions.iter_mut() {
                                    *p = Partition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_start_offset(-1)
                                        .with_leader_epoch(0)
                                        .with_error_code(TOPIC_DENIED.code())
                                        .with_error_message(Some(StrBytes::from_static_str(
                                            crate::api::errors::TOPIC_AUTHORIZATION_FAILED,
                                        )));
                                }
                            }
                        }
                    }
                    ResponseKind::DescribeShareGroupOffsets(d)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: DescribeShareGroupOffsetsRequest,
        _version: i16,
    ) -> Outcome {
        // Reading a share-partition's state may wait for an acknowledgement being persisted:
        // off the async workers.
        let (broker, groups, shares) = (s.broker.clone(), s.groups.clone(), s.shares.clone());
        let response = crate::api::blocking(move || handle(&broker, &groups, &shares, r))
            .await
            .unwrap_or_else(|_| DescribeShareGroupOffsetsResponse::default());
        Outcome::respond(response)
    }
}
