//! ListGroups, with the state filter (v4+) and type filter (v5+: "classic", "consumer" or
//! "share").

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    GroupId, ListGroupsRequest, ListGroupsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::gate::{self, Gate, Who};
use crate::api::{Api, Context, Outcome};
use crate::coordinator::GroupCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

/// `share_groups`: the groups with share-partition state on this broker, listed as empty
/// share groups when the coordinator has no members of theirs (a share group outlives its
/// members, and a restart).
pub fn handle(
    groups: &Arc<GroupCoordinator>,
    share_groups: Vec<String>,
    req: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let coordinator = groups;
    let states: Vec<String> = req
        .states_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let types: Vec<String> = req
        .types_filter
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let mut listed = coordinator.list();
    for id in share_groups {
        if !listed.iter().any(|(g, ..)| *g == id) && coordinator.check_coordinator(&id).is_ok() {
            listed.push((id, "share".to_string(), "Empty", "share"));
        }
    }
    listed.sort();
    let groups = listed
        .into_iter()
        .filter(|(_, _, state, _)| {
            states.is_empty() || states.contains(&state.to_ascii_lowercase())
        })
        .filter(|(_, _, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
        .map(|(id, protocol_type, state, kind)| {
            let mut g = ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(id)))
                .with_protocol_type(StrBytes::from_string(protocol_type));
            if version >= 4 {
                g = g.with_group_state(StrBytes::from_static_str(state));
            }
            if version >= 5 {
                g = g.with_group_type(StrBytes::from_static_str(kind));
            }
            g
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// ListGroups: all groups with DESCRIBE on the cluster, otherwise only those the principal
/// may describe.
pub struct ListGroups;

impl Api for ListGroups {
    type Request = ListGroupsRequest;

    fn authorize(who: &Who, r: ListGroupsRequest, _version: i16) -> Gate {
        if who.may_cluster(Op::Describe) {
            return Gate::Run(RequestKind::ListGroups(r), None);
        }
        let who = who.clone();
        Gate::Run(
            RequestKind::ListGroups(r),
            gate::finish(move |resp| match resp {
                ResponseKind::ListGroups(mut l) => {
                    l.groups
                        .retain(|g| who.may(Op::Describe, Res::Group, &g.group_id));
                    ResponseKind::ListGroups(l)
                }
                other => other,
            }),
        )
    }

    async fn handle(s: &Services, _ctx: &Context, r: ListGroupsRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.groups, s.shares.group_ids(), r, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::test_support::{groups, join};

    fn listed(resp: &ListGroupsResponse) -> Vec<(String, String, String, String)> {
        resp.groups
            .iter()
            .map(|g| {
                (
                    g.group_id.to_string(),
                    g.protocol_type.to_string(),
                    g.group_state.to_string(),
                    g.group_type.to_string(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn groups_are_listed_with_state_and_type_by_version_and_filtered() {
        let groups = groups();
        let joined = join(&groups, "g", "").await;
        assert_eq!(joined.error_code, 0);
        let all = ListGroupsRequest::default();
        assert_eq!(
            listed(&handle(&groups, Vec::new(), all.clone(), 5)),
            [(
                "g".into(),
                "consumer".into(),
                "CompletingRebalance".into(),
                "classic".into()
            )]
        );
        // v3 knows neither state nor type; v4 adds the state.
        assert_eq!(
            listed(&handle(&groups, Vec::new(), all.clone(), 3)),
            [("g".into(), "consumer".into(), String::new(), String::new())]
        );
        assert_eq!(
            listed(&handle(&groups, Vec::new(), all, 4)),
            [(
                "g".into(),
                "consumer".into(),
                "CompletingRebalance".into(),
                String::new()
            )]
        );
        // Filters match case-insensitively.
        let by_state = |s: &'static str| {
            ListGroupsRequest::default().with_states_filter(vec![StrBytes::from_static_str(s)])
        };
        assert_eq!(
            handle(&groups, Vec::new(), by_state("completingrebalance"), 4)
                .groups
                .len(),
            1
        );
        assert!(handle(&groups, Vec::new(), by_state("Empty"), 4)
            .groups
            .is_empty());
        let by_type = |t: &'static str| {
            ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_static_str(t)])
        };
        assert_eq!(
            handle(&groups, Vec::new(), by_type("Classic"), 5)
                .groups
                .len(),
            1
        );
        assert!(handle(&groups, Vec::new(), by_type("consumer"), 5)
            .groups
            .is_empty());
    }
}

#[cfg(test)]
mod authorize_tests {
    use super::*;
    use crate::api::test_support::{allow, broker_with_acls, who};
    use crate::security::acl::{Operation as Op, ResourceType as Res, CLUSTER_NAME};

    fn listed(names: &[&str]) -> Outcome {
        Outcome::respond(
            ListGroupsResponse::default().with_groups(
                names
                    .iter()
                    .map(|n| {
                        ListedGroup::default()
                            .with_group_id(GroupId(StrBytes::from_string(n.to_string())))
                    })
                    .collect(),
            ),
        )
    }

    fn names(outcome: Outcome) -> Vec<String> {
        let Outcome::Respond(r) = outcome else {
            panic!("no response")
        };
        let ResponseKind::ListGroups(l) = *r else {
            panic!("not a ListGroups response")
        };
        l.groups.iter().map(|g| g.group_id.to_string()).collect()
    }

    #[tokio::test]
    async fn only_groups_the_principal_may_describe_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_acls(
            dir.path(),
            &[
                allow("User:alice", Op::Describe, Res::Group, "mine"),
                allow("User:ops", Op::Describe, Res::Cluster, CLUSTER_NAME),
            ],
        );
        let Gate::Run(_, Some(finish)) =
            ListGroups::authorize(&who(&broker, "User:alice"), ListGroupsRequest::default(), 4)
        else {
            panic!("the listing is filtered afterwards")
        };
        assert_eq!(names(finish(listed(&["mine", "theirs"]))), ["mine"]);
        // DESCRIBE on the cluster lists every group.
        assert!(matches!(
            ListGroups::authorize(&who(&broker, "User:ops"), ListGroupsRequest::default(), 4),
            Gate::Run(_, None)
        ));
    }
}
