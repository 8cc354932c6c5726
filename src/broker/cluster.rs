//! The broker's side of replication and cluster mode: the cluster view, partition states the
//! control plane applies (leaders, followers, ISR, coordinator partitions), ISR-eligibility
//! of replicas and the coordinators' topics adopted from the control plane.

use super::*;

impl Broker {
    /// The controller id Metadata and DescribeCluster report: in cluster mode the active
    /// controller (the metadata quorum's leader) when it is a live broker in the answer;
    /// otherwise this broker, which serves admin requests too (Kafka's KRaft brokers report a
    /// live broker, never an absent node, which clients would wait for).
    pub fn controller_id(&self) -> i32 {
        self.quorum()
            .and_then(|q| q.active_controller())
            .filter(|id| self.replication.cluster_broker(*id).is_some())
            .unwrap_or(self.config.node_id)
    }

    /// Cluster mode's metadata quorum; `None` on a single node.
    pub fn quorum(&self) -> Option<&Arc<dyn MetadataQuorum>> {
        self.quorum.get()
    }

    /// Enters cluster mode (once, at start-up, before serving clients).
    pub fn set_quorum(&self, quorum: Arc<dyn MetadataQuorum>) {
        let _ = self.quorum.set(quorum);
    }

    /// The replication state: cluster view, leadership, ISR proposals.
    pub fn replication(&self) -> &super::replica_manager::ReplicaManager {
        &self.replication
    }

    /// Control plane: the registered brokers and their listeners. Metadata, DescribeCluster
    /// and FindCoordinator answer from this view once set, and fetchers connect through it.
    pub fn set_cluster_brokers(&self, brokers: Vec<super::leadership::ClusterBroker>) {
        self.replication.set_cluster(brokers);
        let now = now_ms();
        for t in self.topics() {
            for p in t.partitions.iter().filter(|p| p.is_replicated()) {
                let replicas = p.replica_set().replicas;
                p.set_ineligible_replicas(self.replication.ineligible_among(&replicas), now);
            }
        }
    }

    /// (id, host, port, rack) of broker `id` on the listener the request came in on (the
    /// listener of the same name on that broker): from the cluster view, or this broker's own
    /// listener on a single node.
    pub fn broker_endpoint(
        &self,
        id: i32,
        listener: usize,
    ) -> Option<(i32, String, u16, Option<String>)> {
        let l = self.config.listeners.get(listener)?;
        match self.replication.cluster() {
            Some(brokers) => {
                let b = brokers.iter().find(|b| b.id == id)?;
                let e = b.endpoint(&l.name)?;
                Some((id, e.host.clone(), e.port, b.rack.clone()))
            }
            None if id == self.config.node_id => Some((
                id,
                l.advertised_host.clone(),
                l.advertised_port,
                self.config.rack.clone(),
            )),
            None => None,
        }
    }

    /// (id, host, port, rack) of every broker reachable on the request's listener: the
    /// cluster view's brokers that have a listener of that name, or this broker alone.
    pub fn cluster_endpoints(&self, listener: usize) -> Vec<(i32, String, u16, Option<String>)> {
        self.broker_ids()
            .into_iter()
            .filter_map(|id| self.broker_endpoint(id, listener))
            .collect()
    }

    /// The cluster view's brokers (the registered ones), or this broker alone.
    pub fn broker_ids(&self) -> Vec<i32> {
        match self.replication.cluster() {
            Some(brokers) => brokers.iter().map(|b| b.id).collect(),
            None => vec![self.config.node_id],
        }
    }

    /// Control plane: where this broker sends ISR changes as a partition leader.
    pub fn set_isr_change_sink(&self, sink: Arc<dyn super::leadership::IsrChangeSink>) {
        self.replication.set_sink(sink);
    }

    /// Control plane: applies partition leadership (Kafka's `ReplicaManager.applyDelta`).
    /// Creates the topic and partition logs that do not exist yet, then makes this broker
    /// leader or follower of each partition as Kafka's `Partition.makeLeader` /
    /// `makeFollower` do, and restarts the fetchers of partitions whose leader epoch changed.
    /// States for other partitions are applied even when one fails; the first error is
    /// returned. Blocking (creates directories, writes leader epoch checkpoints).
    pub fn apply_partition_states(
        &self,
        states: Vec<super::leadership::PartitionLeadership>,
    ) -> Result<(), super::leadership::ReplicationError> {
        use super::leadership::ReplicationError;
        let mut first_error = None;
        let mut by_topic: BTreeMap<String, Vec<super::leadership::PartitionLeadership>> =
            BTreeMap::new();
        for s in states {
            by_topic.entry(s.topic.clone()).or_default().push(s);
        }
        let lag_ms = self.config.replication.replica_lag_time_max.as_millis() as i64;
        let now = now_ms();
        let mut follow_changed = false;
        for (name, states) in by_topic {
            let topic_id = states[0].topic_id;
            // Out-of-range partitions are refused below; they do not size the topic.
            let count = states
                .iter()
                .filter(|s| (0..100_000).contains(&s.partition))
                .map(|s| s.partition + 1)
                .max()
                .unwrap_or(1);
            let topic = match self.ensure_topic(&name, topic_id, count) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(topic = %name, error = %e, "cannot apply partition states");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            for state in states {
                if state.topic_id != topic.id {
                    first_error.get_or_insert(ReplicationError::TopicIdMismatch {
                        topic: name.clone(),
                        local: topic.id,
                        given: state.topic_id,
                    });
                    continue;
                }
                let invalid = if !(0..100_000).contains(&state.partition) {
                    Some("partition out of range")
                } else if state.leader_epoch.0 < 0 || state.partition_epoch < 0 {
                    Some("negative epoch")
                } else if state.replicas.is_empty() {
                    Some("no replicas")
                } else if state.leader.is_some_and(|l| !state.replicas.contains(&l)) {
                    Some("the leader is not a replica")
                } else if state.isr.iter().any(|r| !state.replicas.contains(r)) {
                    Some("the ISR is not a subset of the replicas")
                } else {
                    None
                };
                if let Some(reason) = invalid {
                    first_error.get_or_insert(ReplicationError::InvalidState {
                        topic: name.clone(),
                        partition: state.partition,
                        reason,
                    });
                    continue;
                }
                let Some(p) = topic.partitions.get(state.partition as usize) else {
                    continue;
                };
                let was_follower = p.is_replicated() && p.role() == Role::Follower;
                match p.apply_state(&state, lag_ms, now) {
                    Ok(restart) => {
                        p.set_ineligible_replicas(
                            self.replication.ineligible_among(&state.replicas),
                            now,
                        );
                        follow_changed |= restart || was_follower != (p.role() == Role::Follower);
                        if p.role() == Role::None {
                            if let Err(e) = p.delete_local_replica() {
                                tracing::error!(topic = %name, partition = state.partition, error = %e, "cannot delete the local copy of a partition this broker no longer replicates");
                            }
                        }
                        let leader = p.role() == Role::Leader;
                        self.listeners
                            .each(|l| l.leadership_applied(&state, leader));
                        self.replication.record_leadership(state);
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, partition = state.partition, error = %e, "cannot apply partition state");
                        first_error.get_or_insert(e.into());
                    }
                }
            }
        }
        if follow_changed {
            self.replication.follow_changed.notify_one();
        }
        match first_error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Replaces a coordinator topic this broker created on its own (empty, never replicated)
    /// with the control plane's: same name and configs, the cluster's id. Call with
    /// `catalog_writes` held. Blocking.
    fn adopt_internal_topic(
        &self,
        local: &Topic,
        id: Uuid,
        partitions: i32,
    ) -> Result<Arc<Topic>, super::leadership::ReplicationError> {
        let count = partitions.max(local.partitions.len() as i32);
        let mut parts = Vec::with_capacity(count as usize);
        for p in 0..count {
            // Reopens the (empty) directory fresh with the new topic id.
            parts.push(Arc::new(self.open_new_partition(
                &local.name,
                p,
                id,
                &local.config,
            )?));
        }
        let topic = Arc::new(Topic {
            name: local.name.clone(),
            id,
            overrides: local.overrides.clone(),
            config: local.config.clone(),
            partitions: parts,
        });
        {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            c.by_id.remove(&local.id);
            c.by_id.insert(id, topic.clone());
            c.by_name.insert(local.name.clone(), topic.clone());
        }
        self.save_metadata()?;
        tracing::info!(topic = %local.name, local_id = %local.id, %id, "adopted the control plane's id for an empty internal topic");
        Ok(topic)
    }

    /// The topic `name` with at least `partitions` partitions and id `id`, created or grown
    /// as needed (a replica learns topics from the control plane). Blocking.
    pub(crate) fn ensure_topic(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
    ) -> Result<Arc<Topic>, super::leadership::ReplicationError> {
        let _w = self
            .catalog_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(t) = self.topic(name) {
            if t.id != id && adoptable_internal_topic(&t) {
                return self.adopt_internal_topic(&t, id, partitions);
            }
            if t.id != id {
                return Err(super::leadership::ReplicationError::TopicIdMismatch {
                    topic: name.to_string(),
                    local: t.id,
                    given: id,
                });
            }
            if t.partitions.len() as i32 >= partitions {
                return Ok(t);
            }
            let mut parts = t.partitions.clone();
            for p in t.partitions.len() as i32..partitions {
                parts.push(Arc::new(self.open_new_partition(name, p, id, &t.config)?));
            }
            self.replace_topic(Topic {
                name: t.name.clone(),
                id,
                overrides: t.overrides.clone(),
                config: t.config.clone(),
                partitions: parts,
            });
            self.save_metadata()?;
            return self.topic(name).ok_or(TopicError::Unknown.into());
        }
        validate_topic_name(name)?;
        let config = self.topic_config(&BTreeMap::new());
        let mut parts = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            parts.push(Arc::new(self.open_new_partition(name, p, id, &config)?));
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            overrides: BTreeMap::new(),
            config,
            partitions: parts,
        });
        {
            let mut c = self.catalog.write().unwrap_or_else(|e| e.into_inner());
            c.by_name.insert(name.to_string(), topic.clone());
            c.by_id.insert(id, topic.clone());
        }
        self.save_metadata()?;
        tracing::info!(
            topic = name,
            partitions,
            "created topic from the control plane"
        );
        Ok(topic)
    }
}
