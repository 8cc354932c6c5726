//! The group coordinator's share groups (KIP-932): ShareGroupHeartbeat on the group's
//! [`ShareState`], in the same group namespace as classic and consumer groups.

use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;

use super::{group_entry, GroupCoordinator};
use crate::coordinator::share_group::{self, ShareState};

impl GroupCoordinator {
    /// ShareGroupHeartbeat (KIP-932). A group id in use by a classic or consumer group is not
    /// a share group (GROUP_ID_NOT_FOUND, as Kafka answers).
    pub fn share_heartbeat(
        &self,
        group_id: &str,
        req: share_group::ShareHeartbeatIn,
        session_timeout: Duration,
    ) -> Result<share_group::ShareHeartbeatOut, ResponseError> {
        self.on_heartbeat_group(group_id, req.member_epoch, |g| {
            if g.share.is_none() {
                if g.consumer.is_some() || !g.members.is_empty() || !g.offsets.is_empty() {
                    return Err(ResponseError::GroupIdNotFound);
                }
                g.share = Some(ShareState::default());
                g.protocol_type = Some("share".into());
            }
            let s = g.share.as_mut().ok_or(ResponseError::GroupIdNotFound)?;
            let resolve = |name: &str| self.log.resolve_topic(name);
            let member = req.member_id.clone();
            let out = s.heartbeat(req, &resolve, session_timeout, Instant::now());
            tracing::debug!(group = group_id, %member, epoch = ?out.as_ref().map(|o| o.member_epoch), assignment = ?out.as_ref().ok().map(|o| &o.assignment), "share heartbeat");
            out
        })
    }

    /// Runs `f` on a share group's state.
    pub fn with_share_group<R>(
        &self,
        group_id: &str,
        f: impl FnOnce(&share_group::ShareState) -> R,
    ) -> Option<R> {
        self.groups()
            .get(group_id)
            .and_then(|g| g.share.as_ref())
            .map(f)
    }

    /// Makes `group_id` an empty share group unless it is one (AlterShareGroupOffsets on a
    /// new group id, a share group known only by its share-partitions' state). GROUP_ID_NOT_FOUND
    /// when a classic or consumer group has the id.
    pub fn ensure_share_group(&self, group_id: &str) -> Result<(), ResponseError> {
        self.check_coordinator(group_id)?;
        let mut groups = self.groups();
        let g = group_entry(
            &mut groups,
            group_id.to_string(),
            self.config.initial_rebalance_delay,
        );
        if g.share.is_some() {
            return Ok(());
        }
        if g.consumer.is_some() || !g.members.is_empty() || !g.offsets.is_empty() {
            return Err(ResponseError::GroupIdNotFound);
        }
        // Kafka's share group epoch moves when the group's share-partitions are initialized,
        // which creating it with offsets does.
        let mut state = ShareState::default();
        state.group_epoch = 1;
        g.share = Some(state);
        g.protocol_type = Some("share".into());
        Ok(())
    }
}
