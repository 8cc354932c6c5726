//! Kafka API handlers, one file per API. Each takes the decoded request and returns the
//! response body; Kafka-facing error codes are chosen in [`errors`] only.

pub mod acls;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_partition_reassignments;
pub mod api_versions;
pub mod authorize;
pub mod client_quotas;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_transactions;
pub mod elect_leaders;
pub mod end_txn;
pub mod errors;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod scram_credentials;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::protocol::Request;
use crate::services::Services;

pub use crate::blocking::run as blocking;

/// What the connection does after a request.
pub enum Outcome {
    Respond(Box<ResponseKind>),
    /// Nothing to send (a successful produce with acks=0).
    NoResponse,
    /// Close the connection: an acks=0 produce failed, and closing is the only way Kafka can
    /// tell such a producer to refresh its metadata.
    Close(&'static str),
}

/// The connection a request came in on.
pub struct Connection {
    /// Index into `BrokerConfig::listeners`.
    pub listener: usize,
    /// `User:<name>` (SASL or TLS client certificate) or `User:ANONYMOUS`.
    pub principal: String,
}

/// Who sent a request.
pub struct Context {
    pub peer: std::net::SocketAddr,
    pub client_id: String,
    pub listener: usize,
    pub principal: String,
}

impl Context {
    /// Kafka's client host format ("/127.0.0.1").
    pub fn client_host(&self) -> String {
        format!("/{}", self.peer.ip())
    }

    /// Whether this request's principal, from its host, may perform `op` on the resource.
    pub fn allowed(
        &self,
        broker: &Broker,
        op: crate::acl::Operation,
        resource_type: crate::acl::ResourceType,
        name: &str,
    ) -> bool {
        broker.authorizer.authorize(
            &self.principal,
            &self.peer.ip().to_string(),
            op,
            resource_type,
            name,
        )
    }
}

/// Handles one request.
pub async fn handle(
    services: &Services,
    peer: std::net::SocketAddr,
    conn: &Connection,
    request: Request,
) -> Outcome {
    let ctx = Context {
        peer,
        listener: conn.listener,
        principal: conn.principal.clone(),
        client_id: request
            .header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
    };
    let version = request.header.request_api_version;
    let broker = &services.broker;
    let (body, finish) = match authorize::gate(broker, &ctx, request.body, version) {
        authorize::Gate::Answer(response) => return Outcome::Respond(Box::new(response)),
        authorize::Gate::Run(body, finish) => (body, finish),
    };
    let outcome = run(services, &ctx, body, version).await;
    match finish {
        Some(f) => f(outcome),
        None => outcome,
    }
}

/// Runs the handler for an authorized request.
async fn run(services: &Services, ctx: &Context, body: RequestKind, version: i16) -> Outcome {
    let broker = &services.broker;
    let b = broker.clone();
    let (groups, txns) = (&services.groups, &services.txns);
    let cluster = services.cluster.as_ref();
    let response = match body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(r, version)),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(b, r, version, ctx.listener).await)
        }
        RequestKind::Produce(r) => return produce::handle(b, txns, ctx, r, version).await,
        RequestKind::Fetch(r) => {
            // A consumer with a byte quota gets at most what the quota window allows.
            let quota_cap = broker.quotas.clients.max_value_in_window(
                crate::quota::QuotaType::Fetch,
                crate::quota::Client {
                    user: crate::quota::user_of(&ctx.principal),
                    client_id: &ctx.client_id,
                },
            );
            ResponseKind::Fetch(fetch::handle(b, services.tiering.as_ref(), r, version, ctx.listener, quota_cap).await)
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(b, services.tiering.as_ref(), r, version).await)
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(create_topics::handle(b, cluster, r, version).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(delete_topics::handle(b, r, version).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(create_partitions::handle(b, cluster, r).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            alter_partition_reassignments::handle(b, cluster, r).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            list_partition_reassignments::handle(cluster, r),
        ),
        RequestKind::ElectLeaders(r) => ResponseKind::ElectLeaders(elect_leaders::handle(b, cluster, r).await),
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(describe_quorum::handle(b, cluster, r, version).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(describe_configs::handle(&b, r, version))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(incremental_alter_configs::handle_legacy(b, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(incremental_alter_configs::handle(b, r).await)
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(describe_cluster::handle(&b, r, ctx.listener))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(delete_records::handle(b, r).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(b, r).await)
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(describe_log_dirs::handle(b, r).await)
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(init_producer_id::handle(b, txns, r, version).await)
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(find_coordinator::handle(&b, cluster, r, version, ctx.listener))
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(join_group::handle(groups, ctx, r, version).await)
        }
        RequestKind::SyncGroup(r) => {
            ResponseKind::SyncGroup(sync_group::handle(groups, r, version).await)
        }
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(heartbeat::handle(groups, r)),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(leave_group::handle(groups, r, version).await)
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(offset_commit::handle(b, groups, r, version).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(offset_fetch::handle(groups, r, version))
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(describe_groups::handle(groups, r, version))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(list_groups::handle(groups, r, version)),
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(delete_groups::handle(groups.clone(), r).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(offset_delete::handle(groups, r).await)
        }
        RequestKind::ConsumerGroupHeartbeat(r) => {
            ResponseKind::ConsumerGroupHeartbeat(consumer_group_heartbeat::handle(groups, ctx, r))
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(add_partitions_to_txn::handle(b, txns, r, version).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(add_offsets_to_txn::handle(b, txns, r, version).await)
        }
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit::handle(b, groups, txns, r, version).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(end_txn::handle(txns, r, version).await),
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(write_txn_markers::handle(b, groups.clone(), r).await)
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(describe_transactions::handle(txns, r))
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(list_transactions::handle(txns, r))
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(describe_producers::handle(b, r).await)
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(consumer_group_describe::handle(&b, groups, r))
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(scram_credentials::describe(&b, r))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(scram_credentials::alter(b, r).await)
        }
        RequestKind::DescribeAcls(r) => ResponseKind::DescribeAcls(acls::describe(&b, ctx, r)),
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(acls::create(b, ctx, r).await),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(acls::delete(b, ctx, r).await),
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(client_quotas::describe(&b, r))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(client_quotas::alter(b, r).await)
        }
        // SASL requests reach here on listeners without SASL, or after authentication: Kafka
        // answers ILLEGAL_SASL_STATE.
        RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
            kafka_protocol::messages::SaslHandshakeResponse::default()
                .with_error_code(kafka_protocol::ResponseError::IllegalSaslState.code()),
        ),
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            kafka_protocol::messages::SaslAuthenticateResponse::default()
                .with_error_code(kafka_protocol::ResponseError::IllegalSaslState.code())
                .with_error_message(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                    "Unexpected SASL request: this listener does not use SASL or the connection is already authenticated",
                ))),
        ),
        other => {
            // decode_request only admits SUPPORTED_APIS, so this is unreachable in practice;
            // answer nothing rather than panic.
            tracing::warn!(request = ?std::mem::discriminant(&other), "request for an API without a handler");
            return Outcome::NoResponse;
        }
    };
    Outcome::Respond(Box::new(response))
}
