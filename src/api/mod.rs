//! Kafka API handlers, one file per API. Each file holds the API's ACL rules (`authorize`)
//! next to its handler, which takes the decoded request and only the services it uses, and
//! returns the response body; Kafka-facing error codes are chosen in [`errors`] only.
//!
//! [`apis!`] below is the one list of the APIs Strata serves: it drives dispatch, the ACL
//! checks, and the version table that ApiVersions advertises and `decode_request` enforces.

pub mod acls;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_share_group_offsets;
pub mod api_versions;
pub mod client_quotas;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delegation_tokens;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_share_group_offsets;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod elect_leaders;
pub mod end_txn;
pub mod errors;
pub mod fetch;
pub mod find_coordinator;
pub mod gate;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
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
pub mod raft_voters;
pub mod sasl;
pub mod scram_credentials;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_group_state;
pub mod sync_group;
#[cfg(test)]
pub(crate) mod test_support;
pub mod txn_offset_commit;
pub mod unregister_broker;
pub mod update_features;
pub mod write_txn_markers;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::{Message, VersionRange};

use self::gate::{Gate, Who};
use crate::broker::Broker;
use crate::protocol::{FileRecords, Request};
use crate::services::Services;

pub use crate::blocking::run as blocking;

/// One Kafka API: its request, the versions its codec decodes, its ACL rules and its handler.
pub(crate) trait Api {
    type Request: Message + Into<RequestKind>;

    /// The versions the request codec decodes; Strata serves these capped by the key's range
    /// (Apache Kafka 4.1's).
    const VERSIONS: VersionRange = <Self::Request as Message>::VERSIONS;

    /// The ACL checks (only when an authorizer is configured). Without rules, everything
    /// passes.
    fn authorize(_who: &Who, r: Self::Request, _version: i16) -> Gate {
        Gate::Run(r.into(), None)
    }

    /// Runs the handler on an authorized request.
    async fn handle(services: &Services, ctx: &Context, r: Self::Request, version: i16) -> Outcome;
}

/// Generates, from one list of `module::Api` (the type named after its `ApiKey` and
/// `RequestKind` variant), the served keys in ApiVersions order, their version ranges, the
/// ACL dispatch and the handler dispatch.
macro_rules! apis {
    ($($module:ident :: $api:ident),* $(,)?) => {
        /// The APIs Strata serves, in the order ApiVersions lists them.
        pub const SERVED_APIS: &[ApiKey] = &[$(ApiKey::$api),*];

        /// What framing needs of the list: the served keys and their version ranges.
        pub const API_TABLE: crate::protocol::ApiTable = crate::protocol::ApiTable {
            keys: SERVED_APIS,
            versions: served_versions,
        };

        /// (min, max) version Strata accepts for an API, if it serves it at all: the crate's
        /// range (Apache Kafka 4.1's) capped by what the crate's request codec can decode (for
        /// some APIs, e.g. InitProducerId, `ApiKey::valid_versions` is wider than the request
        /// type).
        pub fn served_versions(key: ApiKey) -> Option<(i16, i16)> {
            let codec = match key {
                $(ApiKey::$api => <$module::$api as Api>::VERSIONS,)*
                _ => return None,
            };
            let r = key.valid_versions().intersect(&codec);
            (!r.is_empty()).then_some((r.min, r.max))
        }

        fn authorize(who: &Who, body: RequestKind, version: i16) -> Gate {
            match body {
                $(RequestKind::$api(r) => <$module::$api as Api>::authorize(who, r, version),)*
                other => Gate::Run(other, None),
            }
        }

        /// Runs the handler for an authorized request.
        async fn run(
            services: &Services,
            ctx: &Context,
            body: RequestKind,
            version: i16,
        ) -> Outcome {
            match body {
                $(RequestKind::$api(r) => {
                    <$module::$api as Api>::handle(services, ctx, r, version).await
                })*
                other => {
                    // decode_request only admits SERVED_APIS, so this is unreachable in
                    // practice; answer nothing rather than panic.
                    tracing::warn!(
                        request = ?std::mem::discriminant(&other),
                        "request for an API without a handler"
                    );
                    Outcome::NoResponse
                }
            }
        }
    };
}

apis! {
    produce::Produce,
    fetch::Fetch,
    list_offsets::ListOffsets,
    metadata::Metadata,
    api_versions::ApiVersions,
    create_topics::CreateTopics,
    delete_topics::DeleteTopics,
    delete_records::DeleteRecords,
    init_producer_id::InitProducerId,
    offset_for_leader_epoch::OffsetForLeaderEpoch,
    describe_configs::DescribeConfigs,
    incremental_alter_configs::AlterConfigs,
    incremental_alter_configs::IncrementalAlterConfigs,
    describe_log_dirs::DescribeLogDirs,
    alter_replica_log_dirs::AlterReplicaLogDirs,
    create_partitions::CreatePartitions,
    elect_leaders::ElectLeaders,
    describe_cluster::DescribeCluster,
    describe_quorum::DescribeQuorum,
    raft_voters::AddRaftVoter,
    raft_voters::RemoveRaftVoter,
    update_features::UpdateFeatures,
    describe_topic_partitions::DescribeTopicPartitions,
    find_coordinator::FindCoordinator,
    join_group::JoinGroup,
    sync_group::SyncGroup,
    heartbeat::Heartbeat,
    leave_group::LeaveGroup,
    offset_commit::OffsetCommit,
    offset_fetch::OffsetFetch,
    describe_groups::DescribeGroups,
    list_groups::ListGroups,
    delete_groups::DeleteGroups,
    offset_delete::OffsetDelete,
    consumer_group_heartbeat::ConsumerGroupHeartbeat,
    consumer_group_describe::ConsumerGroupDescribe,
    add_partitions_to_txn::AddPartitionsToTxn,
    add_offsets_to_txn::AddOffsetsToTxn,
    end_txn::EndTxn,
    write_txn_markers::WriteTxnMarkers,
    txn_offset_commit::TxnOffsetCommit,
    describe_producers::DescribeProducers,
    describe_transactions::DescribeTransactions,
    list_transactions::ListTransactions,
    sasl::SaslHandshake,
    sasl::SaslAuthenticate,
    scram_credentials::DescribeUserScramCredentials,
    scram_credentials::AlterUserScramCredentials,
    delegation_tokens::CreateDelegationToken,
    delegation_tokens::RenewDelegationToken,
    delegation_tokens::ExpireDelegationToken,
    delegation_tokens::DescribeDelegationToken,
    acls::DescribeAcls,
    acls::CreateAcls,
    acls::DeleteAcls,
    client_quotas::DescribeClientQuotas,
    client_quotas::AlterClientQuotas,
    alter_partition_reassignments::AlterPartitionReassignments,
    list_partition_reassignments::ListPartitionReassignments,
    unregister_broker::UnregisterBroker,
    list_config_resources::ListConfigResources,
    share_group_heartbeat::ShareGroupHeartbeat,
    share_group_describe::ShareGroupDescribe,
    share_fetch::ShareFetch,
    share_acknowledge::ShareAcknowledge,
    describe_share_group_offsets::DescribeShareGroupOffsets,
    alter_share_group_offsets::AlterShareGroupOffsets,
    delete_share_group_offsets::DeleteShareGroupOffsets,
    share_group_state::InitializeShareGroupState,
    share_group_state::ReadShareGroupState,
    share_group_state::WriteShareGroupState,
    share_group_state::DeleteShareGroupState,
    share_group_state::ReadShareGroupStateSummary,
}
/// What the connection does after a request.
pub enum Outcome {
    Respond(Box<ResponseKind>),
    /// Sends a response whose record sets in the [`FileRecords`] are still in their segment
    /// files (a fetch): the body holds their stand-ins.
    RespondWithFiles(Box<ResponseKind>, FileRecords),
    /// Nothing to send (a successful produce with acks=0).
    NoResponse,
    /// Close the connection: an acks=0 produce failed, and closing is the only way Kafka can
    /// tell such a producer to refresh its metadata.
    Close(&'static str),
}

impl Outcome {
    /// Sends `body`.
    pub fn respond(body: impl Into<ResponseKind>) -> Outcome {
        Outcome::Respond(Box::new(body.into()))
    }
}

/// The connection a request came in on.
pub struct Connection {
    /// Index into `BrokerConfig::listeners`.
    pub listener: usize,
    /// `User:<name>` (SASL or TLS client certificate) or `User:ANONYMOUS`.
    pub principal: String,
    /// Authenticated with a delegation token.
    pub token_authenticated: bool,
}

/// Who sent a request.
pub struct Context {
    pub peer: std::net::SocketAddr,
    pub client_id: String,
    pub listener: usize,
    pub principal: String,
    /// Authenticated with a delegation token (such a connection may not manage tokens).
    pub token_authenticated: bool,
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
        op: crate::security::acl::Operation,
        resource_type: crate::security::acl::ResourceType,
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
        token_authenticated: conn.token_authenticated,
        client_id: request
            .header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
    };
    let version = request.header.request_api_version;
    let broker = &services.broker;
    let gate = if broker.authorizer.is_enabled() {
        let who = Who {
            broker: broker.clone(),
            principal: ctx.principal.clone(),
            host: ctx.peer.ip().to_string(),
        };
        authorize(&who, request.body, version)
    } else {
        Gate::Run(request.body, None)
    };
    let (body, finish) = match gate {
        Gate::Answer(response) => return Outcome::Respond(Box::new(response)),
        Gate::Run(body, finish) => (body, finish),
    };
    let outcome = run(services, &ctx, body, version).await;
    match finish {
        Some(f) => f(outcome),
        None => outcome,
    }
}
