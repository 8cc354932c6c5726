//! What the handler and ACL unit tests build on: a group coordinator over an in-memory
//! `__consumer_offsets`, and a broker with an authorizer and ACLs.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::api::gate::Who;
use crate::api::Context;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::coordinator::test_support::{test_config, MemoryLog};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};

/// A group coordinator that owns every group, with no initial rebalance delay.
pub fn groups() -> Arc<GroupCoordinator> {
    Arc::new(GroupCoordinator::new(
        test_config(),
        Arc::new(MemoryLog::default()),
    ))
}

/// A client connection of `User:alice` from 127.0.0.1.
pub fn context() -> Context {
    Context {
        peer: "127.0.0.1:50000".parse().expect("address"),
        client_id: "test-client".into(),
        listener: 0,
        principal: "User:alice".into(),
        token_authenticated: false,
    }
}

/// A single-node broker in `dir` with the authorizer on and `acls`.
pub fn broker_with_acls(dir: &std::path::Path, acls: &[AclBinding]) -> Arc<Broker> {
    let settings: BTreeMap<String, String> = [
        ("log.dirs", dir.display().to_string()),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_string(),
        ),
        ("super.users", "User:admin".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = BrokerConfig::build(&[settings]).expect("config");
    let broker = Broker::open(config).expect("broker");
    broker.authorizer.add(acls);
    broker
}

/// `principal` may do `op` on the literal resource `name`, from any host.
pub fn allow(principal: &str, op: Operation, rt: ResourceType, name: &str) -> AclBinding {
    AclBinding {
        resource_type: rt,
        resource_name: name.to_string(),
        pattern_type: PatternType::Literal,
        principal: principal.to_string(),
        host: "*".to_string(),
        operation: op,
        permission: Permission::Allow,
    }
}

/// `principal` asking from 127.0.0.1.
pub fn who(broker: &Arc<Broker>, principal: &str) -> Who {
    Who {
        broker: broker.clone(),
        principal: principal.to_string(),
        host: "127.0.0.1".to_string(),
    }
}

/// Joins `member` (empty: a new member) to `group` with JoinGroup v3 (no member id round
/// trip) and returns the response.
pub async fn join(
    groups: &Arc<GroupCoordinator>,
    group: &str,
    member: &str,
) -> kafka_protocol::messages::JoinGroupResponse {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest};
    use kafka_protocol::protocol::StrBytes;
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(30_000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(Bytes::from_static(b"subscription"))]);
    // A new group's first join phase ends on the coordinator's timer, which the runtime
    // ticks; tick it here until the join is answered.
    let ctx = context();
    let joined = crate::api::join_group::handle(groups, &ctx, req, 3);
    tokio::pin!(joined);
    loop {
        tokio::select! {
            response = &mut joined => return response,
            _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => groups.tick(),
        }
    }
}

/// A single-node broker in `dir` with its group and transaction coordinators, as the runtime
/// builds them (no authorizer).
pub fn services(dir: &std::path::Path) -> crate::services::Services {
    let settings: BTreeMap<String, String> =
        [("log.dirs".to_string(), dir.display().to_string())].into();
    let config = BrokerConfig::build(&[settings]).expect("config");
    crate::services::Services::open(config, None).expect("services")
}
