//! The group coordinator's mixed groups: classic JoinGroup, SyncGroup, Heartbeat and
//! LeaveGroup calls to a consumer group, and the conversions between the protocols
//! ([`consumer_group::classic`]), with the writes that keep them in `__consumer_offsets`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::{now_ms, Group, GroupCoordinator};
use crate::coordinator::consumer_group::{self, classic};
use crate::coordinator::group::{JoinRequest, JoinResult, SyncResult};

impl GroupCoordinator {
    /// A ConsumerGroupHeartbeat found group `g` without a consumer state: an empty group
    /// becomes a consumer group (deleting its classic record, if it had one); a classic group
    /// of consumers with members is converted when `group.consumer.migration.policy` allows
    /// upgrades and the member joins (epoch 0); any other group is not a consumer group.
    pub(super) fn become_consumer_group(
        &self,
        g: &mut Group,
        member_epoch: i32,
    ) -> Result<(), ResponseError> {
        if g.members.is_empty() {
            let was_classic = g.protocol_type.is_some() || g.generation > 0;
            let mut c = consumer_group::ConsumerState::new();
            c.replaces_classic = was_classic;
            g.clear_classic();
            g.consumer = Some(c);
            g.protocol_type = Some(classic::PROTOCOL_TYPE.into());
            return Ok(());
        }
        if member_epoch != 0
            || !self.config.migration.upgrade
            || g.protocol_type.as_deref() != Some(classic::PROTOCOL_TYPE)
        {
            return Err(ResponseError::GroupIdNotFound);
        }
        let resolve = |name: &str| self.log.resolve_topic(name);
        classic::upgrade(g, &resolve, Instant::now()).map_err(|e| {
            tracing::warn!(group = %g.id, error = %e, "cannot convert the classic group to a consumer group");
            ResponseError::GroupIdNotFound
        })
    }

    /// Runs a due downgrade of consumer group `g` (its last consumer-protocol member left)
    /// when the policy allows it: `g` becomes a classic group and its next write holds the
    /// conversion.
    pub(super) fn maybe_downgrade(&self, g: &mut Group, rebalance: bool) -> bool {
        let Some(c) = g.consumer.as_mut().filter(|c| c.downgrade_due) else {
            return false;
        };
        c.downgrade_due = false;
        if !self.config.migration.downgrade {
            return false;
        }
        let writer = c.writer.clone();
        let names = |id: &uuid::Uuid| self.log.topic_name(id);
        let records = classic::downgrade(g, &names, rebalance, Instant::now(), now_ms());
        g.unwritten.extend(records);
        g.unwritten_after = Some(writer);
        true
    }

    /// A classic member's JoinGroup to a consumer group with members, under the groups'
    /// lock; `None` when `g` is not such a group.
    pub(super) fn classic_join_to_consumer_group(
        &self,
        g: &mut Group,
        req: &JoinRequest,
    ) -> Option<Result<classic::ClassicJoined, (ResponseError, String)>> {
        let c = g.consumer.as_mut().filter(|c| !c.is_empty())?;
        let resolve = |name: &str| self.log.resolve_topic(name);
        let joined = c.classic_join(req, &resolve, Instant::now());
        if joined.is_ok() {
            // A static classic member replaced the last consumer-protocol member.
            self.maybe_downgrade(g, false);
        }
        Some(joined)
    }

    /// Answers a JoinGroup the consumer group took once what it changed is written.
    pub(super) async fn answer_classic_join(
        self: &Arc<Self>,
        group_id: &str,
        joined: Result<classic::ClassicJoined, (ResponseError, String)>,
    ) -> JoinResult {
        let joined = match joined {
            Ok(j) => j,
            Err((e, member_id)) => return JoinResult::error(e, &member_id),
        };
        if let Err(e) = self.write_group_off_worker(group_id).await {
            return JoinResult::error(e, &joined.member_id);
        }
        tracing::debug!(group = group_id, member = %joined.member_id, generation = joined.generation,
            "JoinGroup answered by the consumer group");
        JoinResult {
            error: None,
            generation: joined.generation,
            protocol_type: Some(classic::PROTOCOL_TYPE.into()),
            protocol_name: Some(joined.protocol_name),
            leader: String::new(),
            member_id: joined.member_id,
            skip_assignment: false,
            members: Vec::new(),
        }
    }

    /// A classic JoinGroup to an empty consumer group: the consumer group is deleted (its
    /// tombstones written first) and the classic group starts over, as in Kafka. Returns
    /// whether there is such a write to make.
    pub(super) fn drop_empty_consumer_group(&self, group_id: &str) -> bool {
        let mut groups = self.groups();
        let Some(g) = groups.get_mut(group_id) else {
            return false;
        };
        let Some(c) = g.consumer.take_if(|c| c.is_empty()) else {
            return !g.unwritten.is_empty();
        };
        g.unwritten.extend(c.tombstones());
        g.unwritten_after = Some(c.writer.clone());
        g.protocol_type = None;
        self.count_removed_consumer(&c);
        true
    }

    fn count_removed_consumer(&self, c: &consumer_group::ConsumerState) {
        self.removed_rebalances
            .fetch_add(c.rebalances, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`Self::write_consumer_group`] on the blocking pool.
    pub(super) async fn write_group_off_worker(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<(), ResponseError> {
        let (me, id) = (self.clone(), group_id.to_string());
        tokio::task::spawn_blocking(move || me.write_consumer_group(&id))
            .await
            .unwrap_or(Err(ResponseError::UnknownServerError))
    }

    /// A classic member's SyncGroup to a consumer group with members, under the groups'
    /// lock; `None` when `g` is not one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn classic_sync_to_consumer_group(
        &self,
        g: &mut Group,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
    ) -> Option<SyncResult> {
        let c = g.consumer.as_mut().filter(|c| !c.is_empty())?;
        let names = |id: &uuid::Uuid| self.log.topic_name(id);
        let result = c.classic_sync(
            member_id,
            group_instance_id,
            generation,
            protocol_type,
            protocol_name,
            &names,
            Instant::now(),
        );
        Some(match result {
            Ok(assignment) => SyncResult {
                error: None,
                protocol_type: protocol_type.map(String::from),
                protocol_name: protocol_name.map(String::from),
                assignment,
            },
            Err(e) => SyncResult::error(e),
        })
    }

    /// Writes the records a protocol conversion left for the group, after the last write of
    /// the consumer group it replaced; on failure they stay for the next write. Blocking.
    pub(super) fn write_unwritten(&self, group_id: &str) -> Result<(), ResponseError> {
        let after = self
            .groups()
            .get(group_id)
            .and_then(|g| g.unwritten_after.clone());
        let _serial = after
            .as_ref()
            .map(|w| w.lock().unwrap_or_else(|e| e.into_inner()));
        let records: Vec<(Bytes, Option<Bytes>)> = match self.groups().get_mut(group_id) {
            Some(g) => std::mem::take(&mut g.unwritten),
            None => return Ok(()),
        };
        if records.is_empty() {
            return Ok(());
        }
        let retry = records.clone();
        let written = self.fenced_write(group_id, || {
            self.log.append(group_id, records).map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot persist a group's protocol conversion");
                e.state_error()
            })
        });
        let mut groups = self.groups();
        if let Some(g) = groups.get_mut(group_id) {
            match written {
                Ok(()) => {
                    if g.unwritten.is_empty() {
                        g.unwritten_after = None;
                    }
                }
                Err(_) => {
                    let later = std::mem::replace(&mut g.unwritten, retry);
                    g.unwritten.extend(later);
                }
            }
        }
        written
    }
}
