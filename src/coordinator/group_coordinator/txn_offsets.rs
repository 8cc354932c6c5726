//! Transactional offsets (TxnOffsetCommit): appended as a transactional batch of the producer
//! and kept pending per producer until its COMMIT or ABORT marker reaches the group's
//! `__consumer_offsets` partition, which materializes or drops them.

use std::collections::HashMap;

use kafka_protocol::ResponseError;

use super::{group_entry, now_ms, GroupCoordinator, OffsetValue, PendingTxnOffsets, RecordKey};
use crate::coordinator::offsets_topic;

impl GroupCoordinator {
    /// TxnOffsetCommit: validates the member like Kafka (a member id must be known, a
    /// generation >= 0 must match), appends the offsets as a transactional batch of the
    /// producer and keeps them pending until its marker. Blocking.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_txn_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<(String, i32, i64, i32, Option<String>)>,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        self.check_coordinator(group_id)?;
        {
            let mut groups = self.groups();
            match groups.get(group_id) {
                Some(g) => {
                    if let Some(c) = g.consumer.as_ref().filter(|c| !c.is_empty()) {
                        if !member_id.is_empty() {
                            match c.members.get(member_id) {
                                None => return Err(ResponseError::UnknownMemberId),
                                Some(m) if generation >= 0 && m.member_epoch != generation => {
                                    // A classic member's epoch is its generation.
                                    return Err(if m.classic.is_some() {
                                        ResponseError::IllegalGeneration
                                    } else {
                                        ResponseError::StaleMemberEpoch
                                    });
                                }
                                Some(_) => {}
                            }
                        }
                    } else {
                        if let Some(instance) = group_instance_id {
                            if g.static_members
                                .get(instance)
                                .is_some_and(|m| !member_id.is_empty() && m != member_id)
                            {
                                return Err(ResponseError::FencedInstanceId);
                            }
                        }
                        if !member_id.is_empty() && !g.members.contains_key(member_id) {
                            return Err(ResponseError::UnknownMemberId);
                        }
                        if generation >= 0 && generation != g.generation {
                            return Err(ResponseError::IllegalGeneration);
                        }
                    }
                }
                None if generation >= 0 => return Err(ResponseError::IllegalGeneration),
                None => {
                    group_entry(
                        &mut groups,
                        group_id.to_string(),
                        self.config.initial_rebalance_delay,
                    );
                }
            }
        }
        let now = now_ms();
        let mut results = Vec::with_capacity(offsets.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for (topic, partition, offset, leader_epoch, metadata) in offsets {
            let metadata = metadata.unwrap_or_default();
            if metadata.len() > self.config.offset_metadata_max_bytes {
                results.push(Some(ResponseError::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp: now,
            };
            records.push((
                offsets_topic::encode_key(&RecordKey::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition,
                }),
                Some(offsets_topic::encode_offset(&value)),
            ));
            accepted.push(((topic, partition), value));
            results.push(None);
        }
        if !records.is_empty() {
            let partition = self.fenced_write(group_id, || {
                self.log
                    .append_transactional(group_id, producer_id, producer_epoch, records)
                    .map_err(|e| {
                        tracing::warn!(group = group_id, producer_id, error = %e, "cannot persist transactional offsets");
                        e.offset_commit_error()
                    })
            })?;
            let mut pending = self.pending_txn();
            let slot = pending
                .entry(producer_id)
                .or_default()
                .entry(group_id.to_string())
                .or_insert_with(|| (partition, HashMap::new()));
            for (k, v) in accepted {
                slot.1.insert(k, v);
            }
        }
        Ok(results)
    }

    /// The producer's COMMIT or ABORT marker was written to `__consumer_offsets` partition
    /// `partition`: its pending offsets there become committed or are dropped.
    pub fn complete_txn_offsets(&self, producer_id: i64, partition: i32, commit: bool) {
        let done = take_pending(&mut self.pending_txn(), producer_id, partition);
        if !commit || done.is_empty() {
            return;
        }
        let mut groups = self.groups();
        for (group, offsets) in done {
            let g = group_entry(&mut groups, group, self.config.initial_rebalance_delay);
            for (k, v) in offsets {
                g.offsets.insert(k, v);
            }
        }
    }

    /// Partitions of a group with transactional offsets not yet committed or aborted (an
    /// OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them).
    pub fn unstable_offsets(&self, group_id: &str) -> Vec<(String, i32)> {
        self.pending_txn()
            .values()
            .filter_map(|groups| groups.get(group_id))
            .flat_map(|(_, offsets)| offsets.keys().cloned())
            .collect()
    }
}

/// Removes and returns the producer's pending offsets in one `__consumer_offsets` partition.
pub(super) fn take_pending(
    pending: &mut PendingTxnOffsets,
    producer_id: i64,
    partition: i32,
) -> Vec<(String, HashMap<(String, i32), OffsetValue>)> {
    let Some(groups) = pending.get_mut(&producer_id) else {
        return Vec::new();
    };
    let ids: Vec<String> = groups
        .iter()
        .filter(|(_, (p, _))| *p == partition)
        .map(|(g, _)| g.clone())
        .collect();
    let out = ids
        .into_iter()
        .filter_map(|g| groups.remove(&g).map(|(_, o)| (g, o)))
        .collect();
    if groups.is_empty() {
        pending.remove(&producer_id);
    }
    out
}
