//! Feature versions (KIP-584): what Strata supports and what it has finalized, reported by
//! ApiVersions (`kafka-features describe`, the clients' feature checks) and confirmed or
//! refused by UpdateFeatures (`kafka-features upgrade / downgrade`).
//!
//! Strata's levels are fixed by its code: it serves the KIP-848 consumer group protocol
//! (`group.version` 1) and transactions without KIP-890's per-transaction epoch bump
//! (`transaction.version` 0, so Kafka 4 clients keep to the protocol Strata implements), and
//! has no share or streams groups, no eligible leader replicas and a static metadata quorum.
//! Each feature supports exactly the levels the code implements, so an update can only
//! confirm a level in that range; anything else is refused as Kafka's controller refuses a
//! level it lacks, with the same error and message. Kafka's `metadata.version` describes
//! Kafka's own metadata log records, which Strata does not have; it is not listed.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    RequestKind, ResponseKind, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::security::acl::Operation as Op;
use crate::services::Services;

/// One feature: the levels this code supports and the level in force.
struct Feature {
    name: &'static str,
    min: i16,
    max: i16,
    finalized: i16,
}

const FEATURES: &[Feature] = &[
    Feature {
        name: "eligible.leader.replicas.version",
        min: 0,
        max: 0,
        finalized: 0,
    },
    Feature {
        name: "group.version",
        min: 1,
        max: 1,
        finalized: 1,
    },
    Feature {
        name: "kraft.version",
        min: 0,
        max: 0,
        finalized: 0,
    },
    Feature {
        name: "share.version",
        min: 0,
        max: 0,
        finalized: 0,
    },
    Feature {
        name: "streams.version",
        min: 0,
        max: 0,
        finalized: 0,
    },
    Feature {
        name: "transaction.version",
        min: 0,
        max: 0,
        finalized: 0,
    },
];

/// The finalized levels never change while Strata runs, so their epoch is constant (a
/// client keeps the features of the highest epoch it has seen; -1 would mean none).
pub const FINALIZED_FEATURES_EPOCH: i64 = 0;

/// ApiVersions' supported features. Below v4 a feature whose minimum is 0 is left out, as
/// Kafka does for clients that cannot read a zero minimum (KIP-1022).
pub fn supported_features(api_versions_version: i16) -> Vec<SupportedFeatureKey> {
    FEATURES
        .iter()
        .filter(|f| api_versions_version >= 4 || f.min > 0)
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(f.name))
                .with_min_version(f.min)
                .with_max_version(f.max)
        })
        .collect()
}

/// ApiVersions' finalized features: those at a level above 0.
pub fn finalized_features() -> Vec<FinalizedFeatureKey> {
    FEATURES
        .iter()
        .filter(|f| f.finalized > 0)
        .map(|f| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(f.name))
                .with_min_version_level(f.finalized)
                .with_max_version_level(f.finalized)
        })
        .collect()
}

/// Kafka's upgrade types (UpdateFeatures v1+; v0's `allow_downgrade` is a safe downgrade).
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;

/// Why one update cannot be applied, in the words of Kafka's `FeatureControlManager`.
fn refusal(name: &str, level: i16, upgrade_type: i8, node_id: i32) -> Option<String> {
    if !(UPGRADE..=UNSAFE_DOWNGRADE).contains(&upgrade_type) {
        return Some("The controller does not support the given upgrade type.".into());
    }
    let Some(f) = FEATURES.iter().find(|f| f.name == name) else {
        return Some(format!(
            "Local controller {node_id} does not support this feature."
        ));
    };
    if !(f.min..=f.max).contains(&level) {
        return Some(format!(
            "Local controller {node_id} only supports versions {}-{}",
            f.min, f.max
        ));
    }
    if level < f.finalized && upgrade_type == UPGRADE {
        return Some(
            "Can't downgrade the version of this feature without setting the upgrade type to \
             either safe or unsafe downgrade."
                .into(),
        );
    }
    if level > f.finalized && upgrade_type != UPGRADE {
        return Some("Can't upgrade to a newer version with a downgrade upgrade type.".into());
    }
    None
}

pub fn handle(req: UpdateFeaturesRequest, version: i16, node_id: i32) -> UpdateFeaturesResponse {
    for u in &req.feature_updates {
        let upgrade_type = match version {
            0 if u.allow_downgrade => SAFE_DOWNGRADE,
            0 => UPGRADE,
            _ => u.upgrade_type,
        };
        let level = u.max_version_level;
        if let Some(reason) = refusal(&u.feature, level, upgrade_type, node_id) {
            // One refused update fails them all, as in Kafka.
            let message = format!(
                "The update failed for all features since the following feature had an error: \
                 Invalid update version {level} for feature {}. {reason}",
                u.feature.as_str()
            );
            return UpdateFeaturesResponse::default()
                .with_error_code(ResponseError::InvalidUpdateVersion.code())
                .with_error_message(Some(StrBytes::from_string(message)));
        }
    }
    // Every level asked for is the one in force (validate-only or not): nothing changes.
    let results = if version < 2 {
        req.feature_updates
            .iter()
            .map(|u| {
                UpdatableFeatureResult::default()
                    .with_feature(u.feature.clone())
                    .with_error_code(0)
                    .with_error_message(Some(StrBytes::from_static_str("NONE")))
            })
            .collect()
    } else {
        Vec::new()
    };
    UpdateFeaturesResponse::default()
        .with_error_message(None)
        .with_results(results)
}

/// UpdateFeatures: ALTER on the cluster.
pub struct UpdateFeatures;

impl Api for UpdateFeatures {
    type Request = UpdateFeaturesRequest;

    fn authorize(who: &Who, r: UpdateFeaturesRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            return Gate::Answer(ResponseKind::UpdateFeatures(
                UpdateFeaturesResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(None),
            ));
        }
        Gate::Run(RequestKind::UpdateFeatures(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: UpdateFeaturesRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(r, version, s.broker.config.node_id))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;

    use super::*;

    fn update(version: i16, updates: &[(&'static str, i16, i8)]) -> UpdateFeaturesResponse {
        let req = UpdateFeaturesRequest::default().with_feature_updates(
            updates
                .iter()
                .map(|&(name, level, upgrade_type)| {
                    FeatureUpdateKey::default()
                        .with_feature(StrBytes::from_static_str(name))
                        .with_max_version_level(level)
                        .with_upgrade_type(upgrade_type)
                        .with_allow_downgrade(upgrade_type != UPGRADE)
                })
                .collect(),
        );
        handle(req, version, 1)
    }

    fn message(r: &UpdateFeaturesResponse) -> &str {
        r.error_message.as_deref().unwrap_or_default()
    }

    #[test]
    fn confirming_the_levels_in_force_succeeds_at_every_version() {
        for version in 0..=2 {
            let r = update(
                version,
                &[("group.version", 1, UPGRADE), ("transaction.version", 0, 1)],
            );
            assert_eq!((r.error_code, r.error_message.as_deref()), (0, None));
            assert_eq!(r.results.len(), if version < 2 { 2 } else { 0 });
            assert!(r.results.iter().all(|x| x.error_code == 0));
        }
    }

    #[test]
    fn levels_strata_lacks_are_refused_with_kafkas_errors() {
        let refused = ResponseError::InvalidUpdateVersion.code();
        let cases: &[(&[(&str, i16, i8)], &str)] = &[
            (&[("transaction.version", 2, UPGRADE)], "Invalid update version 2 for feature transaction.version. Local controller 1 only supports versions 0-0"),
            (&[("group.version", 0, SAFE_DOWNGRADE)], "only supports versions 1-1"),
            (&[("foo.version", 1, UPGRADE)], "Local controller 1 does not support this feature."),
            (&[("group.version", 1, 0)], "does not support the given upgrade type"),
            (&[("group.version", 1, UPGRADE), ("foo.version", 1, UPGRADE)], "feature foo.version"),
        ];
        for &(updates, expected) in cases {
            for version in 1..=2 {
                let r = update(version, updates);
                assert_eq!(r.error_code, refused, "{updates:?}");
                assert!(message(&r).starts_with("The update failed for all features"));
                assert!(message(&r).contains(expected), "{}", message(&r));
                assert!(r.results.is_empty());
            }
        }
    }

    #[test]
    fn api_versions_lists_zero_minimum_features_from_v4_and_finalizes_the_consumer_protocol() {
        let v3: Vec<_> = supported_features(3)
            .iter()
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(v3, ["group.version"]);
        assert_eq!(supported_features(4).len(), FEATURES.len());
        let finalized = finalized_features();
        assert_eq!(finalized.len(), 1);
        assert_eq!(finalized[0].name.as_str(), "group.version");
        assert_eq!(
            (
                finalized[0].min_version_level,
                finalized[0].max_version_level
            ),
            (1, 1)
        );
    }
}
