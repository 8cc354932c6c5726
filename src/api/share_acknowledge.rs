//! ShareAcknowledge (KIP-932): a share consumer's acknowledgements without a fetch, in its
//! share session (epoch -1 also closes the session and releases what the member holds).

use std::collections::BTreeMap;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{
    RequestKind, ResponseKind, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::api::gate::{Gate, Who, GROUP_DENIED, TOPIC_DENIED};
use crate::api::share_fetch::{acknowledge_all, session_key, Acks};
use crate::api::{Api, Context, Outcome};
use crate::security::acl::Operation as Op;
use crate::services::Services;
use crate::share::session::Begun;

fn top_level(code: ResponseError, message: Option<&str>) -> ShareAcknowledgeResponse {
    ShareAcknowledgeResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(|m| StrBytes::from_string(m.to_string())))
}

fn partition(index: i32, error: Option<ResponseError>) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(-1)
                .with_leader_epoch(-1),
        )
}

pub async fn handle(
    s: &Services,
    ctx: &Context,
    req: ShareAcknowledgeRequest,
    version: i16,
) -> ShareAcknowledgeResponse {
    let Some((group, member)) = session_key(req.group_id.as_ref(), req.member_id.as_ref()) else {
        return top_level(ResponseError::InvalidRequest, None);
    };
    let begun = s
        .shares
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .acknowledge(
            (group.clone(), member.clone()),
            req.share_session_epoch,
            ctx.peer,
        );
    let begun = match begun {
        Err(e) => return top_level(e, None),
        Ok(b) => b,
    };
    let mut acks: BTreeMap<(Uuid, i32), Acks> = BTreeMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            acks.entry((t.topic_id, p.partition_index))
                .or_default()
                .extend(
                    p.acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
        }
    }
    let results = acknowledge_all(s, &group, &member, acks, version >= 2).await;
    let lock_ms = s
        .shares
        .settings(&group)
        .record_lock_duration_ms
        .clamp(0, i32::MAX as i64) as i32;
    if begun == Begun::Closed {
        let shares = s.shares.clone();
        let _ = crate::api::blocking(move || shares.release_member(&group, &member)).await;
    }
    let mut topics: Vec<ShareAcknowledgeTopicResponse> = Vec::new();
    for ((id, index), error) in results {
        if topics.last().is_none_or(|t| t.topic_id != id) {
            topics.push(ShareAcknowledgeTopicResponse::default().with_topic_id(id));
        }
        if let Some(t) = topics.last_mut() {
            t.partitions.push(partition(index, error));
        }
    }
    let mut response = ShareAcknowledgeResponse::default().with_responses(topics);
    response.acquisition_lock_timeout_ms = lock_ms;
    response
}

/// ShareAcknowledge: READ on the group and on every topic.
pub struct ShareAcknowledge;

impl Api for ShareAcknowledge {
    type Request = ShareAcknowledgeRequest;

    fn authorize(who: &Who, mut r: ShareAcknowledgeRequest, _version: i16) -> Gate {
        let group = r
            .group_id
            .as_ref()
            .map(|g| g.0.to_string())
            .unwrap_or_default();
        if !who.may_use_group(&group) {
            return Gate::Answer(ResponseKind::ShareAcknowledge(top_level(
                GROUP_DENIED,
                None,
            )));
        }
        let (ok, denied): (Vec<_>, Vec<_>) = r
            .topics
            .into_iter()
            .partition(|t| who.may_topic(Op::Read, "", &t.topic_id));
        r.topics = ok;
        let refusals: Vec<ShareAcknowledgeTopicResponse> = denied
            .into_iter()
            .map(|t| {
                ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| partition(p.partition_index, Some(TOPIC_DENIED)))
                            .collect(),
                    )
            })
            .collect();
        Gate::Run(
            RequestKind::ShareAcknowledge(r),
            crate::api::gate::finish(move |resp| match resp {
                ResponseKind::ShareAcknowledge(mut f) => {
                    f.responses.extend(refusals);
                    ResponseKind::ShareAcknowledge(f)
                }
                other => other,
            }),
        )
    }

    async fn handle(
        s: &Services,
        ctx: &Context,
        r: ShareAcknowledgeRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s, ctx, r, version).await)
    }
}
