//! Replica placement and leader election, computed by the controller before it proposes a
//! command (never inside apply, so they may take seeds chosen by the controller).
//!
//! Placement is Kafka's round-robin assignment (`AdminUtils.assignReplicasToBrokers`):
//! partition `p`'s first replica (its preferred leader) is broker `(p + start) mod n`, and
//! followers come at a shift that grows by one every `n` partitions, so leaders and replicas
//! spread evenly. When brokers have racks, the broker list alternates racks and followers skip
//! racks that already hold a replica until every rack has one. Only unfenced brokers are
//! candidates; a broker without a rack counts as its own "no rack" group.
//!
//! Election follows Kafka's `PartitionChangeBuilder`: keep the current leader while it is in
//! the ISR and usable, else the first usable ISR member in replica order; an unclean election
//! (first usable replica outside the ISR, which becomes the whole ISR) only when the topic
//! allows it.

use std::collections::{BTreeMap, BTreeSet};

use crate::command::{kafka_codes, Command, ConfigResource, ElectionType, PartitionAssignment};
use crate::ids::{BrokerId, LeaderEpoch, TopicId};
use crate::state::{MetadataState, PartitionState, TopicRecord};

/// Kafka's topic config that allows electing a leader outside the ISR.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// A broker replicas may be placed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerCandidate {
    pub id: BrokerId,
    pub rack: Option<String>,
}

/// The unfenced brokers of `state`, by id: the candidates for new replicas.
pub fn usable_brokers(state: &MetadataState) -> Vec<BrokerCandidate> {
    state
        .brokers()
        .filter(|b| !b.fenced)
        .map(|b| BrokerCandidate {
            id: b.id,
            rack: b.rack.clone(),
        })
        .collect()
}

/// Where the round robin starts. Kafka picks both at random per topic; the controller can
/// derive them from the topic id ([`PlacementSeed::from_topic_id`]) so placement is random
/// across topics yet reproducible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementSeed {
    /// Index (in the arranged broker list) of partition 0's first replica.
    pub start_index: usize,
    /// Initial distance of the followers from the first replica.
    pub replica_shift: usize,
}

impl PlacementSeed {
    pub fn from_topic_id(id: TopicId) -> Self {
        let bytes = id.as_bytes();
        let word = |range: std::ops::Range<usize>| {
            bytes[range].iter().fold(0usize, |acc, b| {
                acc.wrapping_mul(256).wrapping_add(usize::from(*b))
            })
        };
        PlacementSeed {
            start_index: word(0..4),
            replica_shift: word(4..8),
        }
    }
}

/// Why replicas could not be placed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("replication factor {requested} is invalid: it must be between 1 and the {available} available brokers")]
    InvalidReplicationFactor { requested: u16, available: usize },
    #[error("partition count must be at least 1")]
    InvalidPartitions,
    #[error("placement found no eligible broker for partition {partition}")]
    NoEligibleBroker { partition: u32 },
}

impl PlacementError {
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            PlacementError::InvalidReplicationFactor { .. } => {
                kafka_codes::INVALID_REPLICATION_FACTOR
            }
            PlacementError::InvalidPartitions => kafka_codes::INVALID_PARTITIONS,
            PlacementError::NoEligibleBroker { .. } => kafka_codes::INVALID_REPLICA_ASSIGNMENT,
        }
    }
}

/// Places `partitions` partitions of `replication_factor` replicas, numbered from
/// `first_partition` (non-zero when adding partitions to a topic), on `brokers`.
pub fn place_replicas(
    brokers: &[BrokerCandidate],
    partitions: u32,
    replication_factor: u16,
    first_partition: u32,
    seed: PlacementSeed,
) -> Result<Vec<PartitionAssignment>, PlacementError> {
    if partitions == 0 {
        return Err(PlacementError::InvalidPartitions);
    }
    if replication_factor == 0 || usize::from(replication_factor) > brokers.len() {
        return Err(PlacementError::InvalidReplicationFactor {
            requested: replication_factor,
            available: brokers.len(),
        });
    }
    let mut sorted = brokers.to_vec();
    sorted.sort_by_key(|b| b.id);
    sorted.dedup_by_key(|b| b.id);
    if usize::from(replication_factor) > sorted.len() {
        return Err(PlacementError::InvalidReplicationFactor {
            requested: replication_factor,
            available: sorted.len(),
        });
    }
    let rack_aware = sorted.iter().any(|b| b.rack.is_some());
    let arranged = if rack_aware {
        rack_alternated(&sorted)
    } else {
        sorted
    };
    let racks: Vec<Option<&str>> = arranged.iter().map(|b| b.rack.as_deref()).collect();
    let rack_count = racks.iter().collect::<BTreeSet<_>>().len();
    let n = arranged.len();
    let start = seed.start_index % n;
    let mut shift = seed.replica_shift % n;

    let mut assignments = Vec::new();
    for partition in first_partition..first_partition.saturating_add(partitions) {
        let p = partition as usize;
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start) % n;
        let mut replicas = vec![arranged[first].id];
        let mut used_racks = BTreeSet::from([racks[first]]);
        let mut used = BTreeSet::from([first]);
        let mut k = 0usize;
        while replicas.len() < usize::from(replication_factor) {
            // Each window of n - 1 consecutive k visits every other broker once, so a valid
            // broker turns up within (rf - 1) * (n - 1) steps; the bound only guards the loop.
            if k > usize::from(replication_factor) * n {
                return Err(PlacementError::NoEligibleBroker { partition });
            }
            let shift_for_racks = if rack_aware {
                shift * rack_count
            } else {
                shift
            };
            let candidate = follower_index(first, shift_for_racks, k, n);
            k += 1;
            let rack_ok = !rack_aware
                || !used_racks.contains(&racks[candidate])
                || used_racks.len() == rack_count;
            let broker_ok = !used.contains(&candidate);
            if rack_ok && broker_ok {
                replicas.push(arranged[candidate].id);
                used_racks.insert(racks[candidate]);
                used.insert(candidate);
            }
        }
        assignments.push(PartitionAssignment { replicas });
    }
    Ok(assignments)
}

/// Kafka's `replicaIndex`: the `k`-th follower candidate of a partition whose first replica
/// is at `first`. Never returns `first` itself.
fn follower_index(first: usize, shift: usize, k: usize, n: usize) -> usize {
    let step = 1 + (shift + k) % (n - 1);
    (first + step) % n
}

/// Kafka's `getRackAlternatedBrokerList`: one broker of each rack in turn (racks sorted,
/// brokers of a rack by id), so consecutive brokers sit in different racks.
fn rack_alternated(sorted: &[BrokerCandidate]) -> Vec<BrokerCandidate> {
    let mut by_rack: BTreeMap<Option<&str>, std::collections::VecDeque<&BrokerCandidate>> =
        BTreeMap::new();
    for broker in sorted {
        by_rack
            .entry(broker.rack.as_deref())
            .or_default()
            .push_back(broker);
    }
    let mut arranged = Vec::with_capacity(sorted.len());
    while arranged.len() < sorted.len() {
        for queue in by_rack.values_mut() {
            if let Some(broker) = queue.pop_front() {
                arranged.push(broker.clone());
            }
        }
    }
    arranged
}

/// The outcome of a leader election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    pub leader: Option<BrokerId>,
    /// The leader was taken from outside the ISR: it becomes the only ISR member and records
    /// the ISR had may be lost.
    pub unclean: bool,
}

/// Chooses a leader among `replicas`: the current leader if it is still in `isr` and usable,
/// else the first usable ISR member in replica order, else (only with `allow_unclean`) the
/// first usable replica.
pub fn elect_leader(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    current_leader: Option<BrokerId>,
    is_usable: impl Fn(BrokerId) -> bool,
    allow_unclean: bool,
) -> Election {
    if let Some(leader) = current_leader {
        if isr.contains(&leader) && is_usable(leader) {
            return Election {
                leader: Some(leader),
                unclean: false,
            };
        }
    }
    if let Some(leader) = replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r) && is_usable(*r))
    {
        return Election {
            leader: Some(leader),
            unclean: false,
        };
    }
    if allow_unclean {
        if let Some(leader) = replicas.iter().copied().find(|r| is_usable(*r)) {
            return Election {
                leader: Some(leader),
                unclean: true,
            };
        }
    }
    Election {
        leader: None,
        unclean: false,
    }
}

/// Whether `topic` allows unclean leader election: its own config, else the cluster-wide
/// dynamic default, else `default_unclean` (the broker's static config).
pub fn unclean_allowed(state: &MetadataState, topic: &TopicRecord, default_unclean: bool) -> bool {
    let parse = |value: &String| value.trim().eq_ignore_ascii_case("true");
    topic
        .configs
        .get(UNCLEAN_LEADER_ELECTION)
        .or_else(|| {
            state
                .configs(&ConfigResource::ClusterDefault)
                .and_then(|c| c.get(UNCLEAN_LEADER_ELECTION))
        })
        .map(parse)
        .unwrap_or(default_unclean)
}

/// The `AlterPartition` commands that move every partition off `broker` once it is (to be)
/// fenced: it leaves each ISR it is in (unless it is the last member: Kafka keeps the last ISR
/// member so no committed data is silently lost), and partitions it led get a new leader
/// from their ISR (or, where the topic allows it, an unclean one) or go offline.
///
/// Propose these after (or together with) [`Command::FenceBroker`]. Each command names the
/// partition epoch it was computed from, so any of them that races another change fails with
/// `InvalidUpdateVersion` and is recomputed from the newer state.
pub fn reelect_for_fenced_broker(
    state: &MetadataState,
    broker: BrokerId,
    default_unclean: bool,
) -> Vec<Command> {
    let usable = |b: BrokerId| b != broker && state.is_usable(b);
    let mut commands = Vec::new();
    for topic in state.topics() {
        for (index, partition) in topic.partitions.iter().enumerate() {
            if partition.leader != Some(broker) && !partition.isr.contains(&broker) {
                continue;
            }
            let mut isr: Vec<BrokerId> = partition
                .isr
                .iter()
                .copied()
                .filter(|b| *b != broker)
                .collect();
            if isr.is_empty() {
                isr = partition.isr.clone();
            }
            let election = elect_leader(
                &partition.replicas,
                &isr,
                partition.leader,
                usable,
                unclean_allowed(state, topic, default_unclean),
            );
            if let (true, Some(leader)) = (election.unclean, election.leader) {
                isr = vec![leader];
            }
            if let Some(command) = change(topic.id, index, partition, election.leader, isr) {
                commands.push(command);
            }
        }
    }
    commands
}

/// The `AlterPartition` commands that bring offline partitions (no leader) back once one of
/// their ISR members (or, where allowed, any replica) is usable again, e.g. after
/// [`Command::UnfenceBroker`].
pub fn elect_offline_partitions(state: &MetadataState, default_unclean: bool) -> Vec<Command> {
    let mut commands = Vec::new();
    for topic in state.topics() {
        for (index, partition) in topic.partitions.iter().enumerate() {
            if partition.leader.is_some() {
                continue;
            }
            let election = elect_leader(
                &partition.replicas,
                &partition.isr,
                None,
                |b| state.is_usable(b),
                unclean_allowed(state, topic, default_unclean),
            );
            let Some(leader) = election.leader else {
                continue;
            };
            let isr = if election.unclean {
                vec![leader]
            } else {
                partition.isr.clone()
            };
            if let Some(command) = change(topic.id, index, partition, Some(leader), isr) {
                commands.push(command);
            }
        }
    }
    commands
}

/// Kafka 4's automatic leader rebalance (`maybeBalancePartitionLeaders`): a preferred
/// [`Command::ElectLeader`] for each partition whose preferred replica does not lead although
/// it is in the ISR and unfenced, at most `max` of them. Leaderless partitions are left to
/// [`elect_offline_partitions`].
pub fn preferred_leader_elections(state: &MetadataState, max: usize) -> Vec<Command> {
    let mut commands = Vec::new();
    for topic in state.topics() {
        for (index, partition) in topic.partitions.iter().enumerate() {
            if commands.len() >= max {
                return commands;
            }
            let Some(preferred) = partition.replicas.first().copied() else {
                continue;
            };
            let imbalanced = partition.leader.is_some_and(|l| l != preferred);
            if imbalanced && partition.isr.contains(&preferred) && state.is_usable(preferred) {
                let Ok(partition) = u32::try_from(index) else {
                    continue;
                };
                commands.push(Command::ElectLeader {
                    topic_id: topic.id,
                    partition,
                    election: ElectionType::Preferred,
                });
            }
        }
    }
    commands
}

/// An `AlterPartition` from `partition` to `leader`/`isr`, or `None` if nothing changes.
fn change(
    topic_id: TopicId,
    index: usize,
    partition: &PartitionState,
    leader: Option<BrokerId>,
    isr: Vec<BrokerId>,
) -> Option<Command> {
    if leader == partition.leader && isr == partition.isr {
        return None;
    }
    let leader_epoch = if leader == partition.leader {
        partition.leader_epoch
    } else {
        LeaderEpoch(partition.leader_epoch.0.saturating_add(1))
    };
    Some(Command::AlterPartition {
        topic_id,
        partition: u32::try_from(index).ok()?,
        leader,
        leader_epoch,
        isr,
        partition_epoch: partition.partition_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Endpoint, Response};
    use crate::ids::{BrokerEpoch, Uuid128};

    fn candidates(ids: &[i32], rack: impl Fn(i32) -> Option<String>) -> Vec<BrokerCandidate> {
        ids.iter()
            .map(|id| BrokerCandidate {
                id: BrokerId(*id),
                rack: rack(*id),
            })
            .collect()
    }

    fn count_by<F: Fn(&PartitionAssignment) -> Vec<BrokerId>>(
        assignments: &[PartitionAssignment],
        pick: F,
    ) -> BTreeMap<BrokerId, usize> {
        let mut counts = BTreeMap::new();
        for a in assignments {
            for b in pick(a) {
                *counts.entry(b).or_default() += 1;
            }
        }
        counts
    }

    #[test]
    fn round_robin_matches_kafka_for_a_fixed_start() {
        // Kafka's AdminUtils with fixedStartIndex = 0 on brokers 0..5, 10 partitions, RF 3.
        let brokers = candidates(&[0, 1, 2, 3, 4], |_| None);
        let placed = place_replicas(&brokers, 10, 3, 0, PlacementSeed::default()).unwrap();
        let expected: Vec<Vec<i32>> = vec![
            vec![0, 1, 2],
            vec![1, 2, 3],
            vec![2, 3, 4],
            vec![3, 4, 0],
            vec![4, 0, 1],
            vec![0, 2, 3],
            vec![1, 3, 4],
            vec![2, 4, 0],
            vec![3, 0, 1],
            vec![4, 1, 2],
        ];
        let got: Vec<Vec<i32>> = placed
            .iter()
            .map(|a| a.replicas.iter().map(|b| b.0).collect())
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn leaders_and_replicas_spread_evenly() {
        let brokers = candidates(&[1, 2, 3, 4], |_| None);
        for start in 0..4 {
            let seed = PlacementSeed {
                start_index: start,
                replica_shift: start * 7,
            };
            let placed = place_replicas(&brokers, 12, 3, 0, seed).unwrap();
            let leaders = count_by(&placed, |a| vec![a.replicas[0]]);
            let replicas = count_by(&placed, |a| a.replicas.clone());
            assert!(leaders.values().all(|c| *c == 3), "{leaders:?}");
            assert!(replicas.values().all(|c| *c == 9), "{replicas:?}");
            for a in &placed {
                let distinct: BTreeSet<_> = a.replicas.iter().collect();
                assert_eq!(distinct.len(), 3);
            }
        }
    }

    #[test]
    fn rack_aware_placement_puts_replicas_in_distinct_racks() {
        // Six brokers in three racks, deliberately unbalanced ids.
        let rack = |id: i32| Some(["a", "a", "b", "b", "c", "c"][id as usize].to_string());
        let brokers = candidates(&[0, 1, 2, 3, 4, 5], rack);
        for start in 0..6 {
            let seed = PlacementSeed {
                start_index: start,
                replica_shift: start,
            };
            let placed = place_replicas(&brokers, 12, 3, 0, seed).unwrap();
            for a in &placed {
                let racks: BTreeSet<_> = a.replicas.iter().map(|b| rack(b.0)).collect();
                assert_eq!(racks.len(), 3, "{:?}", a.replicas);
            }
            let leaders = count_by(&placed, |a| vec![a.replicas[0]]);
            assert!(leaders.values().all(|c| *c == 2), "{leaders:?}");
            let replicas = count_by(&placed, |a| a.replicas.clone());
            assert!(replicas.values().all(|c| *c == 6), "{replicas:?}");
        }
    }

    #[test]
    fn rack_aware_with_more_replicas_than_racks_uses_every_rack_first() {
        let rack = |id: i32| Some(if id < 2 { "a" } else { "b" }.to_string());
        let brokers = candidates(&[0, 1, 2, 3], rack);
        let placed = place_replicas(&brokers, 8, 3, 0, PlacementSeed::default()).unwrap();
        for a in &placed {
            let racks: BTreeSet<_> = a.replicas.iter().map(|b| rack(b.0)).collect();
            assert_eq!(racks.len(), 2);
            let distinct: BTreeSet<_> = a.replicas.iter().collect();
            assert_eq!(distinct.len(), 3);
        }
    }

    #[test]
    fn replication_factor_beyond_the_brokers_is_an_error() {
        let brokers = candidates(&[1, 2], |_| None);
        let err = place_replicas(&brokers, 3, 3, 0, PlacementSeed::default()).unwrap_err();
        assert_eq!(
            err,
            PlacementError::InvalidReplicationFactor {
                requested: 3,
                available: 2
            }
        );
        assert_eq!(err.kafka_error_code(), 38);
        assert!(place_replicas(&brokers, 3, 0, 0, PlacementSeed::default()).is_err());
        assert_eq!(
            place_replicas(&brokers, 0, 1, 0, PlacementSeed::default()),
            Err(PlacementError::InvalidPartitions)
        );
        assert!(place_replicas(&[], 1, 1, 0, PlacementSeed::default()).is_err());
    }

    #[test]
    fn added_partitions_continue_the_round_robin() {
        let brokers = candidates(&[0, 1, 2], |_| None);
        let all = place_replicas(&brokers, 6, 2, 0, PlacementSeed::default()).unwrap();
        let tail = place_replicas(&brokers, 3, 2, 3, PlacementSeed::default()).unwrap();
        assert_eq!(&all[3..], &tail[..]);
    }

    #[test]
    fn seeds_from_topic_ids_are_stable() {
        let id = Uuid128([7; 16]);
        assert_eq!(
            PlacementSeed::from_topic_id(id),
            PlacementSeed::from_topic_id(id)
        );
        let brokers = candidates(&[1, 2, 3], |_| None);
        let placed = place_replicas(&brokers, 3, 3, 0, PlacementSeed::from_topic_id(id)).unwrap();
        assert_eq!(placed.len(), 3);
    }

    #[test]
    fn election_prefers_current_leader_then_isr_order_then_unclean() {
        let replicas = [BrokerId(1), BrokerId(2), BrokerId(3)];
        let all = |_| true;
        let elect = |isr: &[BrokerId], current, usable: &dyn Fn(BrokerId) -> bool, unclean| {
            elect_leader(&replicas, isr, current, usable, unclean)
        };
        assert_eq!(
            elect(&[BrokerId(3), BrokerId(2)], Some(BrokerId(2)), &all, false).leader,
            Some(BrokerId(2))
        );
        assert_eq!(
            elect(&[BrokerId(3), BrokerId(2)], Some(BrokerId(1)), &all, false).leader,
            Some(BrokerId(2))
        );
        let only_1 = |b: BrokerId| b == BrokerId(1);
        assert_eq!(
            elect(&[BrokerId(2)], Some(BrokerId(2)), &only_1, false),
            Election {
                leader: None,
                unclean: false
            }
        );
        assert_eq!(
            elect(&[BrokerId(2)], Some(BrokerId(2)), &only_1, true),
            Election {
                leader: Some(BrokerId(1)),
                unclean: true
            }
        );
    }

    fn cluster() -> MetadataState {
        let mut state = MetadataState::new();
        for id in 1..=3 {
            let index = id as u64;
            let registered = state
                .apply(
                    index,
                    &Command::RegisterBroker {
                        id: BrokerId(id),
                        incarnation: Uuid128([id as u8; 16]),
                        rack: None,
                        endpoints: Vec::<Endpoint>::new(),
                        now_ms: 0,
                    },
                )
                .unwrap();
            assert_eq!(
                registered,
                Response::BrokerRegistered {
                    broker_epoch: BrokerEpoch(index as i64)
                }
            );
            state
                .apply(
                    index + 10,
                    &Command::UnfenceBroker {
                        id: BrokerId(id),
                        broker_epoch: BrokerEpoch(index as i64),
                    },
                )
                .unwrap();
        }
        state
    }

    #[test]
    fn fencing_a_broker_moves_leadership_and_shrinks_isrs() {
        let mut state = cluster();
        let topic = Uuid128([1; 16]);
        let brokers = usable_brokers(&state);
        let partitions = place_replicas(&brokers, 6, 2, 0, PlacementSeed::default()).unwrap();
        state
            .apply(
                20,
                &Command::CreateTopic {
                    name: "t".into(),
                    id: topic,
                    partitions,
                    configs: BTreeMap::new(),
                },
            )
            .unwrap();
        // A single-replica topic on broker 2 only: its last ISR member is kept, leader goes.
        state
            .apply(
                21,
                &Command::CreateTopic {
                    name: "solo".into(),
                    id: Uuid128([2; 16]),
                    partitions: vec![PartitionAssignment {
                        replicas: vec![BrokerId(2)],
                    }],
                    configs: BTreeMap::new(),
                },
            )
            .unwrap();

        state
            .apply(22, &Command::FenceBroker { id: BrokerId(2) })
            .unwrap();
        let commands = reelect_for_fenced_broker(&state, BrokerId(2), false);
        // Broker 2 is a replica of 4 of the 6 partitions of "t", plus "solo".
        assert_eq!(commands.len(), 5);
        for (i, command) in commands.iter().enumerate() {
            let result = state.apply(30 + i as u64, command);
            assert!(result.is_ok(), "{command:?}: {result:?}");
        }
        for p in &state.topic(topic).unwrap().partitions {
            assert!(!p.isr.contains(&BrokerId(2)), "{p:?}");
            assert!(p.leader.is_some() && p.leader != Some(BrokerId(2)), "{p:?}");
        }
        let solo = state.partition(Uuid128([2; 16]), 0).unwrap();
        assert_eq!(solo.leader, None);
        assert_eq!(solo.isr, vec![BrokerId(2)]);
        assert_eq!(solo.leader_epoch, LeaderEpoch(1));
        assert!(reelect_for_fenced_broker(&state, BrokerId(2), false).is_empty());

        // Broker 2 comes back: the offline partition gets its leader back.
        let epoch = state.broker(BrokerId(2)).unwrap().epoch;
        state
            .apply(
                40,
                &Command::UnfenceBroker {
                    id: BrokerId(2),
                    broker_epoch: epoch,
                },
            )
            .unwrap();
        let commands = elect_offline_partitions(&state, false);
        assert_eq!(commands.len(), 1);
        state.apply(41, &commands[0]).unwrap();
        let solo = state.partition(Uuid128([2; 16]), 0).unwrap();
        assert_eq!(
            (solo.leader, solo.leader_epoch),
            (Some(BrokerId(2)), LeaderEpoch(2))
        );
    }

    #[test]
    fn unclean_election_follows_the_topic_config() {
        let mut state = cluster();
        let topic = Uuid128([3; 16]);
        state
            .apply(
                20,
                &Command::CreateTopic {
                    name: "u".into(),
                    id: topic,
                    partitions: vec![PartitionAssignment {
                        replicas: vec![BrokerId(1), BrokerId(2)],
                    }],
                    configs: BTreeMap::from([(
                        UNCLEAN_LEADER_ELECTION.to_owned(),
                        "true".to_owned(),
                    )]),
                },
            )
            .unwrap();
        // The ISR shrinks to {1}, then 1 is fenced: 2 may lead only through unclean election.
        state
            .apply(
                21,
                &Command::AlterPartition {
                    topic_id: topic,
                    partition: 0,
                    leader: Some(BrokerId(1)),
                    leader_epoch: LeaderEpoch(0),
                    isr: vec![BrokerId(1)],
                    partition_epoch: crate::ids::PartitionEpoch(0),
                },
            )
            .unwrap();
        state
            .apply(22, &Command::FenceBroker { id: BrokerId(1) })
            .unwrap();
        let commands = reelect_for_fenced_broker(&state, BrokerId(1), false);
        assert_eq!(commands.len(), 1);
        state.apply(23, &commands[0]).unwrap();
        let p = state.partition(topic, 0).unwrap();
        assert_eq!(
            (p.leader, p.isr.clone()),
            (Some(BrokerId(2)), vec![BrokerId(2)])
        );
    }

    #[test]
    fn rebalance_returns_leadership_to_preferred_replicas_back_in_the_isr() {
        let mut state = cluster();
        let topic = Uuid128([1; 16]);
        let brokers = usable_brokers(&state);
        let partitions = place_replicas(&brokers, 6, 2, 0, PlacementSeed::default()).unwrap();
        let create = Command::CreateTopic {
            name: "t".into(),
            id: topic,
            partitions,
            configs: BTreeMap::new(),
        };
        state.apply(20, &create).unwrap();
        assert!(preferred_leader_elections(&state, 1000).is_empty());

        // Broker 2 is fenced and comes back: it leads nothing and is in no ISR.
        state
            .apply(21, &Command::FenceBroker { id: BrokerId(2) })
            .unwrap();
        for (i, command) in reelect_for_fenced_broker(&state, BrokerId(2), false)
            .iter()
            .enumerate()
        {
            state.apply(30 + i as u64, command).unwrap();
        }
        let epoch = state.broker(BrokerId(2)).unwrap().epoch;
        let unfence = Command::UnfenceBroker {
            id: BrokerId(2),
            broker_epoch: epoch,
        };
        state.apply(40, &unfence).unwrap();
        assert!(
            preferred_leader_elections(&state, 1000).is_empty(),
            "not in the ISR yet"
        );

        // The leaders add it back to their ISRs.
        let rejoins: Vec<Command> = state
            .topic(topic)
            .unwrap()
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| p.replicas.contains(&BrokerId(2)))
            .map(|(i, p)| Command::AlterPartition {
                topic_id: topic,
                partition: i as u32,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                isr: [p.isr.clone(), vec![BrokerId(2)]].concat(),
                partition_epoch: p.partition_epoch,
            })
            .collect();
        for (i, command) in rejoins.iter().enumerate() {
            state.apply(50 + i as u64, command).unwrap();
        }
        let elections = preferred_leader_elections(&state, 1000);
        // Broker 2 is the preferred replica of 2 of the 6 partitions.
        assert_eq!(elections.len(), 2, "{elections:?}");
        assert_eq!(preferred_leader_elections(&state, 1).len(), 1);
        for (i, command) in elections.iter().enumerate() {
            state.apply(60 + i as u64, command).unwrap();
        }
        for p in &state.topic(topic).unwrap().partitions {
            assert_eq!(p.leader, p.replicas.first().copied(), "{p:?}");
        }
        assert!(preferred_leader_elections(&state, 1000).is_empty());
    }
}
