//! An in-process control plane for several brokers in one process: it holds every
//! partition's leadership, pushes it to the registered brokers, and commits the leaders' ISR
//! changes with Kafka's AlterPartition checks (leader epoch, partition epoch, ISR within the
//! replicas). Tests use it to set roles directly; the Raft quorum will replace it in a cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use uuid::Uuid;

use super::{
    AlterPartitionError, AlterPartitionRequest, ClusterBroker, IsrChangeSink, LeaderAndIsr,
    PartitionLeadership,
};
use crate::broker::Broker;

#[derive(Default)]
pub struct InProcessController {
    state: Mutex<ControllerState>,
}

#[derive(Default)]
struct ControllerState {
    brokers: Vec<ClusterBroker>,
    members: HashMap<i32, Weak<Broker>>,
    partitions: HashMap<(Uuid, i32), PartitionLeadership>,
}

impl InProcessController {
    pub fn new() -> Arc<InProcessController> {
        Arc::new(InProcessController::default())
    }

    /// Registers (or re-registers after a restart) a broker: it receives the cluster view,
    /// this controller as its ISR change sink, and every partition state. Blocking.
    pub fn register(self: &Arc<Self>, broker: &Arc<Broker>, endpoint: ClusterBroker) {
        let (brokers, states) = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.brokers.retain(|b| b.id != endpoint.id);
            s.brokers.push(endpoint);
            s.brokers.sort_by_key(|b| b.id);
            s.members
                .insert(broker.config.node_id, Arc::downgrade(broker));
            (
                s.brokers.clone(),
                s.partitions.values().cloned().collect::<Vec<_>>(),
            )
        };
        broker.set_isr_change_sink(self.clone());
        for member in self.members() {
            member.set_cluster_brokers(brokers.clone());
        }
        if let Err(e) = broker.apply_partition_states(states) {
            tracing::error!(error = %e, "applying partition states to a registered broker failed");
        }
    }

    /// Sets partition states (new leaders, replicas, ISR) and pushes them to every broker.
    /// Blocking.
    pub fn set_partitions(&self, states: Vec<PartitionLeadership>) {
        {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            for st in &states {
                s.partitions.insert((st.topic_id, st.partition), st.clone());
            }
        }
        self.push(states);
    }

    /// The partition's state as the controller holds it.
    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<PartitionLeadership> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .partitions
            .get(&(topic_id, partition))
            .cloned()
    }

    fn members(&self) -> Vec<Arc<Broker>> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .members
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn push(&self, states: Vec<PartitionLeadership>) {
        for member in self.members() {
            if let Err(e) = member.apply_partition_states(states.clone()) {
                tracing::error!(node = member.config.node_id, error = %e, "applying partition states failed");
            }
        }
    }

    /// Kafka's controller-side AlterPartition checks and commit.
    fn commit(
        &self,
        r: &AlterPartitionRequest,
    ) -> Result<PartitionLeadership, AlterPartitionError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let current = s
            .partitions
            .get_mut(&(r.topic_id, r.partition))
            .ok_or(AlterPartitionError::UnknownTopicOrPartition)?;
        if r.leader_epoch != current.leader_epoch {
            return Err(AlterPartitionError::FencedLeaderEpoch);
        }
        if r.partition_epoch != current.partition_epoch {
            return Err(AlterPartitionError::InvalidUpdateVersion);
        }
        if r.new_isr.is_empty() || r.new_isr.iter().any(|id| !current.replicas.contains(id)) {
            return Err(AlterPartitionError::InvalidRequest);
        }
        current.isr = r.new_isr.clone();
        current.partition_epoch += 1;
        Ok(current.clone())
    }
}

impl IsrChangeSink for InProcessController {
    fn alter_partition(
        &self,
        request: AlterPartitionRequest,
    ) -> BoxFuture<'static, Result<LeaderAndIsr, AlterPartitionError>> {
        let result = self.commit(&request);
        let members = self.members();
        Box::pin(async move {
            let committed = result?;
            // Every broker learns the new ISR (as from the metadata log), off the async workers.
            let state = committed.clone();
            let _ = tokio::task::spawn_blocking(move || {
                for member in members {
                    if let Err(e) = member.apply_partition_states(vec![state.clone()]) {
                        tracing::error!(node = member.config.node_id, error = %e, "applying an ISR change failed");
                    }
                }
            })
            .await;
            Ok(LeaderAndIsr {
                leader: committed.leader,
                leader_epoch: committed.leader_epoch,
                isr: committed.isr,
                partition_epoch: committed.partition_epoch,
            })
        })
    }
}
