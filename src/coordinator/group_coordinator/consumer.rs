//! The group coordinator's consumer groups (KIP-848): ConsumerGroupHeartbeat on the group's
//! [`ConsumerState`](consumer_group::ConsumerState), and the writes that keep it in
//! `__consumer_offsets` ([`consumer_group::records`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;

use super::{Group, GroupCoordinator};
use crate::coordinator::consumer_group;

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat (KIP-848).
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        req: consumer_group::HeartbeatIn,
        regex_topics: consumer_group::RegexResolver<'_>,
    ) -> Result<consumer_group::HeartbeatOut, ResponseError> {
        self.on_heartbeat_group(group_id, req.member_epoch, |g| {
            self.consumer_heartbeat_in(group_id, g, req, regex_topics)
        })
    }

    fn consumer_heartbeat_in(
        &self,
        group_id: &str,
        g: &mut Group,
        req: consumer_group::HeartbeatIn,
        regex_topics: consumer_group::RegexResolver<'_>,
    ) -> Result<consumer_group::HeartbeatOut, ResponseError> {
        let resolve = |name: &str| self.log.resolve_topic(name);
        if g.share.is_some() {
            return Err(ResponseError::GroupIdNotFound);
        }
        if g.consumer.is_none() {
            self.become_consumer_group(g, req.member_epoch)?;
        }
        let c = g.consumer.as_mut().ok_or(ResponseError::GroupIdNotFound)?;
        let (session_timeout, _) = self.consumer_timeouts(group_id);
        // The request is consumed by the state machine: keep what the debug line needs, and
        // only format the owned partitions when debug logging is on.
        let debug = tracing::enabled!(tracing::Level::DEBUG);
        let (member, epoch) = (req.member_id.clone(), req.member_epoch);
        let owned = if debug {
            format!("{:?}", req.owned)
        } else {
            String::new()
        };
        let out = c.heartbeat(req, &resolve, regex_topics, session_timeout, Instant::now());
        let group_epoch = c.group_epoch;
        // The last member of the consumer protocol left a group of classic members.
        self.maybe_downgrade(g, true);
        if debug {
            match &out {
                Ok(o) => {
                    tracing::debug!(group = group_id, %member, epoch, %owned, new_epoch = o.member_epoch, assignment = ?o.assignment, group_epoch, "consumer heartbeat")
                }
                Err(e) => {
                    tracing::debug!(group = group_id, %member, epoch, %owned, error = ?e, "consumer heartbeat refused")
                }
            }
        }
        out
    }

    /// Whether a consumer-protocol group has changes its records do not hold yet (or a
    /// converted group its conversion).
    pub fn consumer_group_needs_write(&self, group_id: &str) -> bool {
        self.groups().get_mut(group_id).is_some_and(|g| {
            !g.unwritten.is_empty()
                || g.consumer
                    .as_mut()
                    .is_some_and(|c| c.drop_unchanged(group_id))
        })
    }

    /// Writes what changed in a consumer-protocol group since its last write (Kafka's
    /// records, [`consumer_group::records`]) and waits until it is acknowledged; answers the
    /// write's error otherwise, and the next write takes the changes again. Blocking.
    pub fn write_consumer_group(&self, group_id: &str) -> Result<(), ResponseError> {
        // A conversion between the protocols goes first.
        self.write_unwritten(group_id)?;
        let Some(writer) = self
            .groups()
            .get(group_id)
            .and_then(|g| g.consumer.as_ref())
            .map(|c| c.writer.clone())
        else {
            return Ok(());
        };
        let _serial = writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut changes = {
            let mut groups = self.groups();
            match groups.get_mut(group_id).and_then(|g| g.consumer.as_mut()) {
                Some(c) if Arc::ptr_eq(&c.writer, &writer) => c.take_changes(group_id),
                _ => return Ok(()),
            }
        };
        if changes.is_empty() {
            return Ok(());
        }
        let records = std::mem::take(&mut changes.records);
        let written = self.fenced_write(group_id, || {
            self.log.append(group_id, records).map_err(|e| {
                tracing::warn!(group = group_id, error = %e, "cannot persist consumer group");
                e.state_error()
            })
        });
        if written.is_err() {
            let mut groups = self.groups();
            if let Some(c) = groups.get_mut(group_id).and_then(|g| g.consumer.as_mut()) {
                if Arc::ptr_eq(&c.writer, &writer) {
                    c.undo(changes);
                }
            }
        }
        written
    }

    /// Runs `f` on a consumer-protocol group's state.
    pub fn with_consumer_group<R>(
        &self,
        group_id: &str,
        f: impl FnOnce(&consumer_group::ConsumerState) -> R,
    ) -> Option<R> {
        self.groups()
            .get(group_id)
            .and_then(|g| g.consumer.as_ref())
            .map(f)
    }

    /// The heartbeat interval a KIP-848 group's members are told to keep.
    pub fn consumer_heartbeat_interval(&self, group_id: &str) -> Duration {
        self.consumer_timeouts(group_id).1
    }
}
