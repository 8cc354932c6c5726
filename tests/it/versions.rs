//! Every API version the broker advertises answers a realistic request with a response that
//! decodes at that version (a field set outside its versions would close the connection).

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::alter_configs_request as ac;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request as iac;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::client::Client;
use crate::groups::{
    self, commit_request, group_id, join_new, join_request, offset_fetch_request, simple_commit,
    sync_request, SESSION_MS,
};
use crate::harness::*;
use crate::transactions as txn;

struct Ctx {
    topic_id: uuid::Uuid,
    partitions: i32,
    /// OffsetFetch: "sweep-fetch" has a committed offset.
    committed: bool,
    /// DescribeGroups: "sweep-described" is a Stable group with a member.
    described: bool,
}

/// A new member of a new group `group`, after its SyncGroup: (member id, generation).
async fn stable_member(c: &mut Client, group: &str) -> (String, i32) {
    let r = join_new(c, group, None, SESSION_MS).await;
    assert_eq!(r.error_code, 0, "join {group}: {r:?}");
    let id = r.member_id.to_string();
    let assignment = vec![(id.clone(), groups::assignment("sweep", &[0]))];
    let s = c
        .call(
            groups::SYNC_V,
            &sync_request(group, &id, None, r.generation_id, assignment),
        )
        .await;
    assert_eq!(s.error_code, 0, "sync {group}: {s:?}");
    (id, r.generation_id)
}

/// Builds a realistic request for `api` at `v`, first setting up on `c` what it needs (a group
/// with a member, committed offsets) so that the answer carries no error.
async fn request_for(api: ApiKey, v: i16, ctx: &mut Ctx, c: &mut Client) -> RequestKind {
    match api {
        ApiKey::Produce => {
            let mut r = produce_request("sweep", 0, batch(2), -1);
            if v >= 13 {
                r.topic_data[0].name = Default::default();
                r.topic_data[0].topic_id = ctx.topic_id;
            }
            r.into()
        }
        ApiKey::Fetch => {
            let mut p = FetchPartition::default();
            p.partition_max_bytes = 1 << 20;
            let mut t = FetchTopic::default();
            if v >= 13 {
                t.topic_id = ctx.topic_id;
            } else {
                t.topic = name("sweep");
            }
            t.partitions = vec![p];
            let mut r = FetchRequest::default();
            r.max_bytes = 1 << 20;
            r.topics = vec![t];
            r.into()
        }
        ApiKey::ListOffsets => {
            let mut p = ListOffsetsPartition::default();
            p.timestamp = -1;
            let mut t = ListOffsetsTopic::default();
            t.name = name("sweep");
            t.partitions = vec![p];
            let mut r = ListOffsetsRequest::default();
            r.replica_id = (-1).into();
            r.topics = vec![t];
            r.into()
        }
        ApiKey::Metadata => {
            let mut r = MetadataRequest::default();
            r.topics = if v == 0 { Some(vec![]) } else { None };
            r.into()
        }
        ApiKey::ApiVersions => api_versions_request().into(),
        ApiKey::CreateTopics => {
            let mut t = CreatableTopic::default();
            t.name = name(&format!("sweep-created-v{v}"));
            t.num_partitions = 1;
            t.replication_factor = 1;
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 10_000;
            r.into()
        }
        ApiKey::DeleteTopics => {
            let missing = name(&format!("never-existed-v{v}"));
            let mut r = DeleteTopicsRequest::default();
            if v >= 6 {
                let mut s = DeleteTopicState::default();
                s.name = Some(missing);
                r.topics = vec![s];
            } else {
                r.topic_names = vec![missing];
            }
            r.timeout_ms = 10_000;
            r.into()
        }
        ApiKey::DeleteRecords => {
            let mut p = DeleteRecordsPartition::default();
            p.offset = 0;
            let mut t = DeleteRecordsTopic::default();
            t.name = name("sweep");
            t.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 10_000;
            r.into()
        }
        ApiKey::InitProducerId => {
            let mut r = InitProducerIdRequest::default();
            r.transactional_id = None;
            r.transaction_timeout_ms = 60_000;
            r.producer_id = (-1).into();
            r.producer_epoch = -1;
            r.into()
        }
        ApiKey::OffsetForLeaderEpoch => {
            let mut p = OffsetForLeaderPartition::default();
            p.current_leader_epoch = -1;
            p.leader_epoch = 0;
            let mut t = OffsetForLeaderTopic::default();
            t.topic = name("sweep");
            t.partitions = vec![p];
            let mut r = OffsetForLeaderEpochRequest::default();
            r.replica_id = (-1).into();
            r.topics = vec![t];
            r.into()
        }
        ApiKey::DescribeConfigs => {
            let mut res = DescribeConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = str_bytes("sweep");
            res.configuration_keys = None;
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![res];
            r.include_synonyms = v >= 1;
            r.into()
        }
        ApiKey::AlterConfigs => {
            let mut c = ac::AlterableConfig::default();
            c.name = str_bytes("retention.ms");
            c.value = Some(str_bytes("86400000"));
            let mut res = ac::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = str_bytes("sweep");
            res.configs = vec![c];
            let mut r = AlterConfigsRequest::default();
            r.resources = vec![res];
            r.into()
        }
        ApiKey::IncrementalAlterConfigs => {
            let mut c = iac::AlterableConfig::default();
            c.name = str_bytes("retention.ms");
            c.config_operation = 0;
            c.value = Some(str_bytes("86400000"));
            let mut res = iac::AlterConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = str_bytes("sweep");
            res.configs = vec![c];
            let mut r = IncrementalAlterConfigsRequest::default();
            r.resources = vec![res];
            r.into()
        }
        ApiKey::DescribeLogDirs => {
            let mut r = DescribeLogDirsRequest::default();
            r.topics = None;
            r.into()
        }
        ApiKey::AlterReplicaLogDirs => {
            // "Move" sweep-0 to the log dir it is in (the broker has one): answered NONE.
            let mut d = DescribeLogDirsRequest::default();
            d.topics = None;
            let dirs: DescribeLogDirsResponse = c.call(1, &d).await;
            let dir = dirs.results[0].log_dir.clone();
            AlterReplicaLogDirsRequest::default()
                .with_dirs(vec![
                    alter_replica_log_dirs_request::AlterReplicaLogDir::default()
                        .with_path(dir)
                        .with_topics(vec![
                            alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                                .with_name(name("sweep"))
                                .with_partitions(vec![0]),
                        ]),
                ])
                .into()
        }
        ApiKey::CreatePartitions => {
            ctx.partitions += 1;
            let mut t = CreatePartitionsTopic::default();
            t.name = name("sweep");
            t.count = ctx.partitions;
            t.assignments = None;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 10_000;
            r.into()
        }
        ApiKey::ElectLeaders => {
            // Every partition: on a single node none needs an election, so none is listed.
            let mut r = ElectLeadersRequest::default();
            r.topic_partitions = None;
            r.timeout_ms = 10_000;
            r.into()
        }
        ApiKey::DescribeCluster => DescribeClusterRequest::default().into(),
        ApiKey::DescribeQuorum => {
            let mut p = describe_quorum_request::PartitionData::default();
            p.partition_index = 0;
            let mut t = describe_quorum_request::TopicData::default();
            t.topic_name = name("__cluster_metadata");
            t.partitions = vec![p];
            let mut r = DescribeQuorumRequest::default();
            r.topics = vec![t];
            r.into()
        }
        ApiKey::FindCoordinator => {
            let mut r = FindCoordinatorRequest::default();
            if v >= 4 {
                r.coordinator_keys = vec![str_bytes("sweep-group"), str_bytes("sweep-other")];
            } else {
                r.key = str_bytes("sweep-group");
            }
            r.into()
        }
        ApiKey::JoinGroup => {
            // A new member of a new group: v4+ first answers MEMBER_ID_REQUIRED.
            let mut r = join_request(&format!("sweep-join-v{v}"), "", None, SESSION_MS);
            if v >= 8 {
                r.reason = Some(str_bytes("sweep"));
            }
            r.into()
        }
        ApiKey::SyncGroup => {
            let group = format!("sweep-sync-v{v}");
            let r = join_new(c, &group, None, SESSION_MS).await;
            assert_eq!(r.error_code, 0, "join {group}: {r:?}");
            let id = r.member_id.to_string();
            let assignment = vec![(id.clone(), groups::assignment("sweep", &[0]))];
            let mut s = sync_request(&group, &id, None, r.generation_id, assignment);
            if v < 5 {
                s.protocol_type = None;
                s.protocol_name = None;
            }
            s.into()
        }
        ApiKey::Heartbeat => {
            let group = format!("sweep-heartbeat-v{v}");
            let (id, generation) = stable_member(c, &group).await;
            let mut r = HeartbeatRequest::default();
            r.group_id = group_id(&group);
            r.member_id = str_bytes(&id);
            r.generation_id = generation;
            r.into()
        }
        ApiKey::LeaveGroup => {
            let group = format!("sweep-leave-v{v}");
            let (id, _) = stable_member(c, &group).await;
            let mut r = LeaveGroupRequest::default();
            r.group_id = group_id(&group);
            if v >= 3 {
                let mut m = MemberIdentity::default();
                m.member_id = str_bytes(&id);
                if v >= 5 {
                    m.reason = Some(str_bytes("sweep"));
                }
                r.members = vec![m];
            } else {
                r.member_id = str_bytes(&id);
            }
            r.into()
        }
        ApiKey::OffsetCommit => {
            // A simple commit (no generation, no member) to a group without members.
            let mut r = commit_request(
                v,
                &format!("sweep-commit-v{v}"),
                -1,
                "",
                None,
                "sweep",
                &[(0, 2, 0, "sweep")],
            );
            if v >= 10 {
                r.topics[0].topic_id = ctx.topic_id;
            }
            r.into()
        }
        ApiKey::OffsetFetch => {
            if !ctx.committed {
                simple_commit(c, "sweep-fetch", "sweep", &[(0, 1)]).await;
                ctx.committed = true;
            }
            let groups: &[groups::FetchSpec] = if v >= 8 {
                &[
                    ("sweep-fetch", Some(("sweep", &[0]))),
                    ("sweep-fetch", None),
                    ("sweep-never", None),
                ]
            } else {
                &[("sweep-fetch", Some(("sweep", &[0])))]
            };
            let mut r = offset_fetch_request(v, groups);
            if v >= 10 {
                for t in r
                    .groups
                    .iter_mut()
                    .flat_map(|g| g.topics.iter_mut().flatten())
                {
                    t.topic_id = ctx.topic_id;
                }
            }
            r.require_stable = v >= 7;
            r.into()
        }
        ApiKey::DescribeGroups => {
            if !ctx.described {
                stable_member(c, "sweep-described").await;
                ctx.described = true;
            }
            let mut r = DescribeGroupsRequest::default();
            r.groups = vec![group_id("sweep-described")];
            r.include_authorized_operations = v >= 3;
            r.into()
        }
        ApiKey::ListGroups => {
            let mut r = ListGroupsRequest::default();
            if v >= 4 {
                r.states_filter = vec![str_bytes("Stable"), str_bytes("Empty")];
            }
            if v >= 5 {
                r.types_filter = vec![str_bytes("classic")];
            }
            r.into()
        }
        ApiKey::DeleteGroups => {
            let group = format!("sweep-delete-v{v}");
            simple_commit(c, &group, "sweep", &[(0, 1)]).await;
            let mut r = DeleteGroupsRequest::default();
            r.groups_names = vec![group_id(&group)];
            r.into()
        }
        ApiKey::OffsetDelete => {
            let group = format!("sweep-offset-delete-v{v}");
            simple_commit(c, &group, "sweep", &[(0, 1)]).await;
            let mut p = OffsetDeleteRequestPartition::default();
            p.partition_index = 0;
            let mut t = OffsetDeleteRequestTopic::default();
            t.name = name("sweep");
            t.partitions = vec![p];
            let mut r = OffsetDeleteRequest::default();
            r.group_id = group_id(&group);
            r.topics = vec![t];
            r.into()
        }
        ApiKey::ConsumerGroupHeartbeat => {
            // A fresh member joins a KIP-848 group subscribed to "sweep".
            let mut r = ConsumerGroupHeartbeatRequest::default();
            r.group_id = group_id(&format!("sweep-848-v{v}"));
            r.member_id = str_bytes(&uuid::Uuid::new_v4().to_string());
            r.member_epoch = 0;
            r.rebalance_timeout_ms = 30_000;
            r.subscribed_topic_names = Some(vec![name("sweep")]);
            r.topic_partitions = Some(vec![]);
            r.into()
        }
        ApiKey::ConsumerGroupDescribe => {
            let group = format!("sweep-848-describe-v{v}");
            let mut hb = ConsumerGroupHeartbeatRequest::default();
            hb.group_id = group_id(&group);
            hb.member_id = str_bytes(&uuid::Uuid::new_v4().to_string());
            hb.member_epoch = 0;
            hb.rebalance_timeout_ms = 30_000;
            hb.subscribed_topic_names = Some(vec![name("sweep")]);
            hb.topic_partitions = Some(vec![]);
            let h = c.call(0, &hb).await;
            assert_eq!(h.error_code, 0, "join before describe");
            let mut r = ConsumerGroupDescribeRequest::default();
            r.group_ids = vec![group_id(&group)];
            r.into()
        }
        ApiKey::AddPartitionsToTxn => {
            let id = format!("sweep-txn-add-v{v}");
            let producer = txn::init_txn(c, &id).await;
            if v < 4 {
                txn::add_partitions_request(&id, producer, "sweep", &[0]).into()
            } else {
                // v4+ (brokers): verify a partition the producer added.
                assert_eq!(
                    txn::add_partitions(c, &id, producer, "sweep", &[0]).await,
                    vec![0]
                );
                let mut t = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                t.name = name("sweep");
                t.partitions = vec![0];
                let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default();
                x.transactional_id = txn::txn_id(&id);
                x.producer_id = producer.0.into();
                x.producer_epoch = producer.1;
                x.verify_only = true;
                x.topics = vec![t];
                let mut r = AddPartitionsToTxnRequest::default();
                r.transactions = vec![x];
                r.into()
            }
        }
        ApiKey::AddOffsetsToTxn => {
            let id = format!("sweep-txn-offsets-v{v}");
            let producer = txn::init_txn(c, &id).await;
            txn::add_offsets_request(&id, producer, "sweep-txn-group").into()
        }
        ApiKey::TxnOffsetCommit => {
            let id = format!("sweep-txn-commit-v{v}");
            let producer = txn::init_txn(c, &id).await;
            let r = c
                .call(
                    txn::ADD_OFFSETS_V,
                    &txn::add_offsets_request(&id, producer, "sweep-txn-group"),
                )
                .await;
            assert_eq!(r.error_code, 0);
            let mut r = txn::txn_offset_commit_request(
                &id,
                producer,
                "sweep-txn-group",
                "sweep",
                &[(0, 1)],
            );
            if v >= 6 {
                r.topics[0].topic_id = ctx.topic_id;
            }
            r.into()
        }
        ApiKey::EndTxn => {
            let id = format!("sweep-txn-end-v{v}");
            let producer = txn::init_txn(c, &id).await;
            assert_eq!(
                txn::add_partitions(c, &id, producer, "sweep", &[0]).await,
                vec![0]
            );
            txn::end_request(&id, producer, v % 2 == 0).into()
        }
        ApiKey::WriteTxnMarkers => {
            let (pid, epoch) = init_producer_id(c).await;
            let mut t = write_txn_markers_request::WritableTxnMarkerTopic::default();
            t.name = name("sweep");
            t.partition_indexes = vec![0];
            let mut m = write_txn_markers_request::WritableTxnMarker::default();
            m.producer_id = pid.into();
            m.producer_epoch = epoch;
            m.transaction_result = false;
            m.coordinator_epoch = 0;
            m.topics = vec![t];
            let mut r = WriteTxnMarkersRequest::default();
            r.markers = vec![m];
            r.into()
        }
        ApiKey::DescribeProducers => {
            let mut t = describe_producers_request::TopicRequest::default();
            t.name = name("sweep");
            t.partition_indexes = vec![0];
            let mut r = DescribeProducersRequest::default();
            r.topics = vec![t];
            r.into()
        }
        ApiKey::DescribeTransactions => {
            txn::init_txn(c, "sweep-txn-described").await;
            let mut r = DescribeTransactionsRequest::default();
            r.transactional_ids = vec![txn::txn_id("sweep-txn-described")];
            r.into()
        }
        ApiKey::ListTransactions => {
            let mut r = ListTransactionsRequest::default();
            r.duration_filter = -1;
            if v >= 2 {
                r.transactional_id_pattern = Some(str_bytes("sweep-.*"));
            }
            r.into()
        }
        ApiKey::SaslHandshake => {
            let mut r = SaslHandshakeRequest::default();
            r.mechanism = str_bytes("PLAIN");
            r.into()
        }
        ApiKey::SaslAuthenticate => {
            let mut r = SaslAuthenticateRequest::default();
            r.auth_bytes = bytes::Bytes::from_static(b"\0u\0p");
            r.into()
        }
        ApiKey::DescribeUserScramCredentials => {
            DescribeUserScramCredentialsRequest::default().into()
        }
        ApiKey::AlterUserScramCredentials => {
            let mut u = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
            u.name = str_bytes(&format!("sweep-user-v{v}"));
            u.mechanism = 1;
            u.iterations = 4096;
            u.salt = bytes::Bytes::from_static(b"salt");
            u.salted_password = bytes::Bytes::from(vec![7u8; 32]);
            let mut r = AlterUserScramCredentialsRequest::default();
            r.upsertions = vec![u];
            r.into()
        }
        ApiKey::CreateDelegationToken => CreateDelegationTokenRequest::default()
            .with_max_lifetime_ms(-1)
            .into(),
        ApiKey::RenewDelegationToken => RenewDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::from(vec![1u8; 64]))
            .with_renew_period_ms(60_000)
            .into(),
        ApiKey::ExpireDelegationToken => ExpireDelegationTokenRequest::default()
            .with_hmac(bytes::Bytes::from(vec![1u8; 64]))
            .with_expiry_time_period_ms(-1)
            .into(),
        ApiKey::DescribeDelegationToken => DescribeDelegationTokenRequest::default().into(),
        ApiKey::DescribeAcls => {
            let mut r = DescribeAclsRequest::default();
            r.resource_type_filter = 1;
            r.pattern_type_filter = 1;
            r.operation = 1;
            r.permission_type = 1;
            r.into()
        }
        ApiKey::CreateAcls => {
            let mut a = create_acls_request::AclCreation::default();
            a.resource_type = 2;
            a.resource_name = str_bytes("sweep");
            a.resource_pattern_type = 3;
            a.principal = str_bytes("User:sweep");
            a.host = str_bytes("*");
            a.operation = 3;
            a.permission_type = 3;
            let mut r = CreateAclsRequest::default();
            r.creations = vec![a];
            r.into()
        }
        ApiKey::DeleteAcls => {
            let mut f = delete_acls_request::DeleteAclsFilter::default();
            f.resource_type_filter = 1;
            f.pattern_type_filter = 1;
            f.operation = 1;
            f.permission_type = 1;
            let mut r = DeleteAclsRequest::default();
            r.filters = vec![f];
            r.into()
        }
        ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::default().into(),
        ApiKey::AlterClientQuotas => {
            let mut e = alter_client_quotas_request::EntityData::default();
            e.entity_type = str_bytes("client-id");
            e.entity_name = Some(str_bytes(&format!("sweep-client-v{v}")));
            let mut op = alter_client_quotas_request::OpData::default();
            op.key = str_bytes("producer_byte_rate");
            op.value = 1_048_576.0;
            let mut entry = alter_client_quotas_request::EntryData::default();
            entry.entity = vec![e];
            entry.ops = vec![op];
            let mut r = AlterClientQuotasRequest::default();
            r.entries = vec![entry];
            r.into()
        }
        ApiKey::AlterPartitionReassignments => {
            // A single node: staying on this node is the one valid target.
            let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
            p.replicas = Some(vec![BrokerId(1)]);
            let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
            t.name = TopicName(str_bytes("sweep"));
            t.partitions = vec![p];
            let mut r = AlterPartitionReassignmentsRequest::default();
            r.topics = vec![t];
            r.into()
        }
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::default().into(),
        // Another node, not an observer of a single node's quorum: REQUEST_TIMED_OUT.
        ApiKey::AddRaftVoter => AddRaftVoterRequest::default()
            .with_cluster_id(None)
            .with_timeout_ms(1000)
            .with_voter_id(999)
            .with_voter_directory_id(uuid::Uuid::from_bytes([9; 16]))
            .with_listeners(vec![add_raft_voter_request::Listener::default()
                .with_name(str_bytes("CONTROLLER"))
                .with_host(str_bytes("127.0.0.1"))
                .with_port(1)])
            .into(),
        // Not a voter of a single node's quorum: VOTER_NOT_FOUND.
        ApiKey::RemoveRaftVoter => RemoveRaftVoterRequest::default()
            .with_cluster_id(None)
            .with_voter_id(999)
            .with_voter_directory_id(uuid::Uuid::from_bytes([9; 16]))
            .into(),
        // Another broker's id: a single node answers BROKER_ID_NOT_REGISTERED.
        ApiKey::UnregisterBroker => UnregisterBrokerRequest::default()
            .with_broker_id(BrokerId(999))
            .into(),
        ApiKey::ListConfigResources => ListConfigResourcesRequest::default()
            .with_resource_types(if v >= 1 { vec![2, 4] } else { vec![] })
            .into(),
        ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::default()
            .with_topics(vec![
                describe_topic_partitions_request::TopicRequest::default()
                    .with_name(TopicName(str_bytes("sweep"))),
            ])
            .with_response_partition_limit(2000)
            .into(),
        ApiKey::UpdateFeatures => UpdateFeaturesRequest::default()
            .with_timeout_ms(30_000)
            .with_feature_updates(vec![update_features_request::FeatureUpdateKey::default()
                .with_feature(str_bytes("group.version"))
                .with_max_version_level(1)
                .with_upgrade_type(1)])
            .into(),
        // Share groups: "sweep-share" gets a member, which then opens a share session per
        // ShareFetch version and acknowledges nothing in it; "sweep-share-empty" has no member,
        // so its offsets can be set and deleted.
        ApiKey::ShareGroupHeartbeat => ShareGroupHeartbeatRequest::default()
            .with_group_id(groups::group_id("sweep-share"))
            .with_member_id(str_bytes("sweep-share-member"))
            .with_member_epoch(0)
            .with_subscribed_topic_names(Some(vec![name("sweep")]))
            .into(),
        ApiKey::ShareGroupDescribe => ShareGroupDescribeRequest::default()
            .with_group_ids(vec![groups::group_id("sweep-share")])
            .into(),
        ApiKey::ShareFetch => ShareFetchRequest::default()
            .with_group_id(Some(groups::group_id("sweep-share")))
            .with_member_id(Some(str_bytes(&format!("sweep-share-v{v}"))))
            .with_share_session_epoch(0)
            .with_max_records(100)
            .with_topics(vec![share_fetch_request::FetchTopic::default()
                .with_topic_id(ctx.topic_id)
                .with_partitions(vec![
                    share_fetch_request::FetchPartition::default().with_partition_index(0),
                ])])
            .into(),
        ApiKey::ShareAcknowledge => ShareAcknowledgeRequest::default()
            .with_group_id(Some(groups::group_id("sweep-share")))
            .with_member_id(Some(str_bytes(&format!("sweep-share-v{v}"))))
            .with_share_session_epoch(1)
            .into(),
        ApiKey::DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest::default()
            .with_groups(vec![
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(groups::group_id("sweep-share")),
            ])
            .into(),
        ApiKey::AlterShareGroupOffsets => AlterShareGroupOffsetsRequest::default()
            .with_group_id(groups::group_id("sweep-share-empty"))
            .with_topics(vec![
                alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(name("sweep"))
                    .with_partitions(vec![
                        alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(0)
                            .with_start_offset(0),
                    ]),
            ])
            .into(),
        ApiKey::DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest::default()
            .with_group_id(groups::group_id("sweep-share-empty"))
            .with_topics(vec![
                delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(name("sweep")),
            ])
            .into(),
        // The share coordinator's inter-broker APIs on group "sweep-state": initialized at
        // start offset 1, read and written by a leader at epoch 0 and summarized; the delete
        // is of another group's state, so the later calls still find this one's.
        ApiKey::InitializeShareGroupState => InitializeShareGroupStateRequest::default()
            .with_group_id(str_bytes("sweep-state"))
            .with_topics(vec![
                initialize_share_group_state_request::InitializeStateData::default()
                    .with_topic_id(ctx.topic_id)
                    .with_partitions(vec![
                        initialize_share_group_state_request::PartitionData::default()
                            .with_partition(0)
                            .with_state_epoch(0)
                            .with_start_offset(1),
                    ]),
            ])
            .into(),
        ApiKey::ReadShareGroupState => ReadShareGroupStateRequest::default()
            .with_group_id(str_bytes("sweep-state"))
            .with_topics(vec![read_share_group_state_request::ReadStateData::default()
                .with_topic_id(ctx.topic_id)
                .with_partitions(vec![
                    read_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_leader_epoch(0),
                ])])
            .into(),
        ApiKey::WriteShareGroupState => WriteShareGroupStateRequest::default()
            .with_group_id(str_bytes("sweep-state"))
            .with_topics(vec![write_share_group_state_request::WriteStateData::default()
                .with_topic_id(ctx.topic_id)
                .with_partitions(vec![
                    write_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_state_epoch(0)
                        .with_leader_epoch(0)
                        .with_start_offset(1)
                        .with_state_batches(vec![
                            write_share_group_state_request::StateBatch::default()
                                .with_first_offset(1)
                                .with_last_offset(2)
                                .with_delivery_state(2)
                                .with_delivery_count(1),
                        ]),
                ])])
            .into(),
        ApiKey::DeleteShareGroupState => DeleteShareGroupStateRequest::default()
            .with_group_id(str_bytes("sweep-state-deleted"))
            .with_topics(vec![delete_share_group_state_request::DeleteStateData::default()
                .with_topic_id(ctx.topic_id)
                .with_partitions(vec![
                    delete_share_group_state_request::PartitionData::default().with_partition(0),
                ])])
            .into(),
        ApiKey::ReadShareGroupStateSummary => ReadShareGroupStateSummaryRequest::default()
            .with_group_id(str_bytes("sweep-state"))
            .with_topics(vec![
                read_share_group_state_summary_request::ReadStateSummaryData::default()
                    .with_topic_id(ctx.topic_id)
                    .with_partitions(vec![
                        read_share_group_state_summary_request::PartitionData::default()
                            .with_partition(0)
                            .with_leader_epoch(0),
                    ]),
            ])
            .into(),
        other => panic!("ApiVersions lists {other:?}, which this test does not know"),
    }
}

/// The error codes a response carries, flattened (top level and per item).
fn error_codes(resp: &ResponseKind) -> Vec<i16> {
    match resp {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::Fetch(r) => std::iter::once(r.error_code)
            .chain(
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::Metadata(r) => r.topics.iter().map(|t| t.error_code).collect(),
        ResponseKind::ApiVersions(r) => vec![r.error_code],
        ResponseKind::CreateTopics(r) => r.topics.iter().map(|t| t.error_code).collect(),
        ResponseKind::DeleteTopics(_) => vec![],
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::InitProducerId(r) => vec![r.error_code],
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DescribeConfigs(r) => r.results.iter().map(|x| x.error_code).collect(),
        ResponseKind::AlterConfigs(r) => r.responses.iter().map(|x| x.error_code).collect(),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().map(|x| x.error_code).collect()
        }
        ResponseKind::DescribeLogDirs(r) => std::iter::once(r.error_code)
            .chain(r.results.iter().map(|x| x.error_code))
            .collect(),
        ResponseKind::AlterReplicaLogDirs(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::CreatePartitions(r) => r.results.iter().map(|x| x.error_code).collect(),
        ResponseKind::DescribeCluster(r) => vec![r.error_code],
        ResponseKind::DescribeQuorum(r) => std::iter::once(r.error_code)
            .chain(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::FindCoordinator(r) => std::iter::once(r.error_code)
            .chain(r.coordinators.iter().map(|x| x.error_code))
            .collect(),
        ResponseKind::JoinGroup(r) => vec![r.error_code],
        ResponseKind::SyncGroup(r) => vec![r.error_code],
        ResponseKind::Heartbeat(r) => vec![r.error_code],
        ResponseKind::LeaveGroup(r) => std::iter::once(r.error_code)
            .chain(r.members.iter().map(|m| m.error_code))
            .collect(),
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::OffsetFetch(r) => std::iter::once(r.error_code)
            .chain(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .chain(r.groups.iter().flat_map(|g| {
                std::iter::once(g.error_code).chain(
                    g.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
                )
            }))
            .collect(),
        ResponseKind::DescribeGroups(r) => r.groups.iter().map(|g| g.error_code).collect(),
        ResponseKind::ListGroups(r) => vec![r.error_code],
        ResponseKind::DeleteGroups(r) => r.results.iter().map(|x| x.error_code).collect(),
        ResponseKind::OffsetDelete(r) => std::iter::once(r.error_code)
            .chain(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ConsumerGroupHeartbeat(r) => vec![r.error_code],
        ResponseKind::ConsumerGroupDescribe(r) => r.groups.iter().map(|g| g.error_code).collect(),
        ResponseKind::AddPartitionsToTxn(r) => std::iter::once(r.error_code)
            .chain(
                r.results_by_topic_v3_and_below
                    .iter()
                    .chain(
                        r.results_by_transaction
                            .iter()
                            .flat_map(|t| &t.topic_results),
                    )
                    .flat_map(|t| {
                        t.results_by_partition
                            .iter()
                            .map(|p| p.partition_error_code)
                    }),
            )
            .collect(),
        ResponseKind::AddOffsetsToTxn(r) => vec![r.error_code],
        ResponseKind::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::EndTxn(r) => vec![r.error_code],
        ResponseKind::WriteTxnMarkers(r) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DescribeProducers(r) => r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DescribeTransactions(r) => {
            r.transaction_states.iter().map(|t| t.error_code).collect()
        }
        ResponseKind::ListTransactions(r) => vec![r.error_code],
        ResponseKind::SaslHandshake(r) => vec![r.error_code],
        ResponseKind::SaslAuthenticate(r) => vec![r.error_code],
        ResponseKind::DescribeUserScramCredentials(r) => vec![r.error_code],
        ResponseKind::DescribeAcls(r) => vec![r.error_code],
        ResponseKind::CreateAcls(r) => r.results.iter().map(|x| x.error_code).collect(),
        ResponseKind::DeleteAcls(r) => r.filter_results.iter().map(|x| x.error_code).collect(),
        ResponseKind::AlterUserScramCredentials(r) => {
            r.results.iter().map(|x| x.error_code).collect()
        }
        ResponseKind::DescribeClientQuotas(r) => vec![r.error_code],
        ResponseKind::CreateDelegationToken(r) => vec![r.error_code],
        ResponseKind::RenewDelegationToken(r) => vec![r.error_code],
        ResponseKind::ExpireDelegationToken(r) => vec![r.error_code],
        ResponseKind::DescribeDelegationToken(r) => vec![r.error_code],
        ResponseKind::AlterClientQuotas(r) => r.entries.iter().map(|e| e.error_code).collect(),
        ResponseKind::AlterPartitionReassignments(r) => std::iter::once(r.error_code)
            .chain(
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ListPartitionReassignments(r) => vec![r.error_code],
        ResponseKind::UnregisterBroker(r) => vec![r.error_code],
        ResponseKind::AddRaftVoter(r) => vec![r.error_code],
        ResponseKind::RemoveRaftVoter(r) => vec![r.error_code],
        ResponseKind::ListConfigResources(r) => vec![r.error_code],
        ResponseKind::UpdateFeatures(r) => std::iter::once(r.error_code)
            .chain(r.results.iter().map(|x| x.error_code))
            .collect(),
        ResponseKind::DescribeTopicPartitions(r) => r
            .topics
            .iter()
            .flat_map(|t| {
                std::iter::once(t.error_code).chain(t.partitions.iter().map(|p| p.error_code))
            })
            .collect(),
        ResponseKind::ElectLeaders(r) => std::iter::once(r.error_code)
            .chain(
                r.replica_election_results
                    .iter()
                    .flat_map(|t| t.partition_result.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::ShareGroupHeartbeat(r) => vec![r.error_code],
        ResponseKind::ShareGroupDescribe(r) => r.groups.iter().map(|g| g.error_code).collect(),
        ResponseKind::ShareFetch(r) => std::iter::once(r.error_code)
            .chain(r.responses.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .flat_map(|p| [p.error_code, p.acknowledge_error_code])
            }))
            .collect(),
        ResponseKind::ShareAcknowledge(r) => std::iter::once(r.error_code)
            .chain(
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::DescribeShareGroupOffsets(r) => r
            .groups
            .iter()
            .flat_map(|g| {
                std::iter::once(g.error_code).chain(
                    g.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
                )
            })
            .collect(),
        ResponseKind::AlterShareGroupOffsets(r) => std::iter::once(r.error_code)
            .chain(
                r.responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
            )
            .collect(),
        ResponseKind::DeleteShareGroupOffsets(r) => std::iter::once(r.error_code)
            .chain(r.responses.iter().map(|t| t.error_code))
            .collect(),
        ResponseKind::InitializeShareGroupState(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::ReadShareGroupState(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::WriteShareGroupState(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::DeleteShareGroupState(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        ResponseKind::ReadShareGroupStateSummary(r) => r
            .results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect(),
        _ => vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_api_version_answers_with_a_decodable_response() {
    let b = TestBroker::start_with(&groups::GROUP_SETTINGS).await;
    let mut c = b.client().await;
    let topic_id = create_topic(&mut c, "sweep", 1).await;
    produce(&mut c, "sweep", 0, batch(3)).await;
    let apis = c.call(3, &api_versions_request()).await.api_keys;
    assert!(apis.len() >= 16);
    let mut ctx = Ctx {
        topic_id,
        partitions: 1,
        committed: false,
        described: false,
    };
    let mut checked = 0;
    let mut undecodable = Vec::new();
    for a in &apis {
        let api = ApiKey::try_from(a.api_key).expect("known api key");
        for v in a.min_version..=a.max_version {
            let req = request_for(api, v, &mut ctx, &mut c).await;
            let id = c.next_correlation_id();
            let mut buf = BytesMut::new();
            buf.put_i32(0);
            let mut h = RequestHeader::default();
            h.request_api_key = a.api_key;
            h.request_api_version = v;
            h.correlation_id = id;
            h.client_id = Some(str_bytes("sweep"));
            h.encode(&mut buf, api.request_header_version(v)).unwrap();
            if let Err(e) = req.encode(&mut buf, v) {
                // The request codec (the same one the broker decodes with) does not know this
                // version, yet the broker advertises it.
                undecodable.push(format!("{api:?} v{v}: {e:#}"));
                continue;
            }
            let len = (buf.len() - 4) as i32;
            buf[..4].copy_from_slice(&len.to_be_bytes());
            c.write_raw(&buf).await.unwrap();
            let mut frame = c
                .read_frame()
                .await
                .unwrap_or_else(|e| panic!("{api:?} v{v}: no response ({e})"));
            let header =
                ResponseHeader::decode(&mut frame, api.response_header_version(v)).unwrap();
            assert_eq!(header.correlation_id, id, "{api:?} v{v}");
            let resp = ResponseKind::decode(api, &mut frame, v)
                .unwrap_or_else(|e| panic!("decode {api:?} v{v}: {e:#}"));
            assert!(
                frame.is_empty(),
                "{api:?} v{v}: {} trailing bytes",
                frame.len()
            );
            let codes = error_codes(&resp);
            if api == ApiKey::DeleteTopics {
                if let ResponseKind::DeleteTopics(r) = &resp {
                    assert_eq!(r.responses.len(), 1, "{api:?} v{v}");
                    assert_eq!(r.responses[0].error_code, 3, "{api:?} v{v}");
                }
            } else if api == ApiKey::UnregisterBroker {
                assert_eq!(codes, vec![102], "{api:?} v{v}: {resp:?}");
            } else if api == ApiKey::AddRaftVoter {
                assert_eq!(codes, vec![7], "{api:?} v{v}: {resp:?}");
            } else if api == ApiKey::RemoveRaftVoter {
                assert_eq!(codes, vec![127], "{api:?} v{v}: {resp:?}");
            } else if matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
                // On a PLAINTEXT listener Kafka answers ILLEGAL_SASL_STATE.
                assert_eq!(codes, vec![34], "{api:?} v{v}: {resp:?}");
            } else if matches!(
                api,
                ApiKey::CreateDelegationToken
                    | ApiKey::RenewDelegationToken
                    | ApiKey::ExpireDelegationToken
                    | ApiKey::DescribeDelegationToken
            ) {
                // Over PLAINTEXT Kafka answers DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
                assert_eq!(codes, vec![64], "{api:?} v{v}: {resp:?}");
            } else if matches!(
                api,
                ApiKey::DescribeAcls | ApiKey::CreateAcls | ApiKey::DeleteAcls
            ) {
                // No authorizer configured: Kafka answers SECURITY_DISABLED.
                assert_eq!(codes, vec![54], "{api:?} v{v}: {resp:?}");
            } else if api == ApiKey::JoinGroup && v >= 4 {
                // A new member of a group is first asked to rejoin with the id it is handed.
                if let ResponseKind::JoinGroup(r) = &resp {
                    assert_eq!(r.error_code, 79, "{api:?} v{v}: {r:?}");
                    assert!(!r.member_id.is_empty(), "{api:?} v{v}: no member id");
                }
            } else {
                assert!(
                    !codes.is_empty() || api == ApiKey::Metadata,
                    "{api:?} v{v}: nothing answered"
                );
                assert!(
                    codes.iter().all(|&e| e == 0),
                    "{api:?} v{v}: errors {codes:?} in {resp:?}"
                );
            }
            if let ResponseKind::Fetch(r) = &resp {
                assert!(
                    count_records(&r.responses[0].partitions[0].records) > 0,
                    "Fetch v{v}: no records"
                );
            }
            match &resp {
                ResponseKind::FindCoordinator(r) if v >= 4 => {
                    assert_eq!(r.coordinators.len(), 2, "{api:?} v{v}");
                }
                ResponseKind::OffsetFetch(r) => {
                    let offset = if v >= 8 {
                        assert_eq!(r.groups.len(), 3, "{api:?} v{v}");
                        r.groups[0].topics[0].partitions[0].committed_offset
                    } else {
                        r.topics[0].partitions[0].committed_offset
                    };
                    assert_eq!(offset, 1, "{api:?} v{v}: committed offset");
                    if v >= 10 {
                        // Named by id: the one asked for, and in the all-topics answer.
                        assert_eq!(r.groups[0].topics[0].topic_id, ctx.topic_id, "v{v}");
                        assert_eq!(r.groups[1].topics[0].topic_id, ctx.topic_id, "v{v}");
                    }
                }
                ResponseKind::OffsetCommit(r) if v >= 10 => {
                    assert_eq!(r.topics[0].topic_id, ctx.topic_id, "{api:?} v{v}");
                }
                ResponseKind::TxnOffsetCommit(r) if v >= 6 => {
                    assert_eq!(r.topics[0].topic_id, ctx.topic_id, "{api:?} v{v}");
                }
                ResponseKind::DescribeGroups(r) => {
                    assert_eq!(r.groups[0].group_state.as_str(), "Stable", "{api:?} v{v}");
                    assert_eq!(r.groups[0].members.len(), 1, "{api:?} v{v}");
                }
                ResponseKind::ListGroups(r) => {
                    assert!(
                        r.groups
                            .iter()
                            .any(|g| g.group_id.0.as_str() == "sweep-described"),
                        "{api:?} v{v}: {r:?}"
                    );
                }
                _ => {}
            }
            if let ResponseKind::ListConfigResources(r) = &resp {
                let listed = |name: &str, t: i8| {
                    r.config_resources
                        .iter()
                        .any(|c| c.resource_name.as_str() == name && c.resource_type == t)
                };
                // v0 lists client-metrics resources only, of which Strata has none.
                assert_eq!(v == 0, r.config_resources.is_empty(), "v{v}: {r:?}");
                assert!(
                    v == 0 || (listed("sweep", 2) && listed("1", 4)),
                    "v{v}: {r:?}"
                );
            }
            if let ResponseKind::Metadata(r) = &resp {
                assert!(
                    r.topics
                        .iter()
                        .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "sweep")),
                    "Metadata v{v}: topic missing"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 80, "only {checked} api versions checked");
    assert!(
        undecodable.is_empty(),
        "advertised in ApiVersions but not decodable by the broker: {undecodable:#?}"
    );
    b.shutdown().await;
}

/// ApiVersions advertises InitProducerId up to the crate's `ApiKey` table (v6), but the
/// request decoder stops at v5: a client that picks v6 (the highest both sides list) has its
/// connection closed instead of getting a producer id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_at_the_advertised_max_version_gets_an_answer() {
    let b = TestBroker::start().await;
    let mut c = b.client().await;
    let apis = c.call(3, &api_versions_request()).await.api_keys;
    let max = apis
        .iter()
        .find(|a| a.api_key == ApiKey::InitProducerId as i16)
        .expect("InitProducerId listed")
        .max_version;
    // InitProducerId v5/v6 body (flexible): transactional_id (compact nullable string, null),
    // transaction_timeout_ms, producer_id, producer_epoch, [v6+: enable_2pc,
    // keep_prepared_txn], no tagged fields.
    let mut body = BytesMut::new();
    body.put_u16(0); // request header v2: client_id null
    body.put_u8(0); // header tagged fields
    body.put_u8(0); // transactional_id = null
    body.put_i32(60_000);
    body.put_i64(-1);
    body.put_i16(-1);
    if max >= 6 {
        body.put_u8(0);
        body.put_u8(0);
    }
    body.put_u8(0);
    let frame = crate::client::raw_frame(ApiKey::InitProducerId as i16, max, 42, &body);
    c.write_raw(&frame).await.unwrap();
    let mut reply = c.read_frame().await.unwrap_or_else(|e| {
        panic!("InitProducerId v{max} (advertised max): connection closed ({e})")
    });
    let header = ResponseHeader::decode(
        &mut reply,
        ApiKey::InitProducerId.response_header_version(max),
    )
    .unwrap();
    assert_eq!(header.correlation_id, 42);
    let resp = InitProducerIdResponse::decode(&mut reply, max).unwrap();
    assert_eq!(resp.error_code, 0);
    assert!(resp.producer_id.0 >= 0);
    b.shutdown().await;
}
