//! UpdateFeatures (`kafka-features upgrade / downgrade`) and ApiVersions' feature lists, over
//! the levels in [`crate::features`]. An update is checked as Kafka's controller checks it,
//! with the same errors and messages; one refused update fails the whole request.

use std::collections::BTreeMap;

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    RequestKind, ResponseKind, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::features::{FinalizedLevels, FEATURES};
use crate::security::acl::Operation as Op;
use crate::services::Services;

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
pub fn finalized_features(levels: &FinalizedLevels) -> Vec<FinalizedFeatureKey> {
    FEATURES
        .iter()
        .map(|f| (f.name, levels.level(f.name)))
        .filter(|&(_, level)| level > 0)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect()
}

/// Kafka's upgrade types (UpdateFeatures v1+; v0's `allow_downgrade` is a safe downgrade).
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;

/// Why one update cannot be applied, in the words of Kafka's `FeatureControlManager`.
fn refusal(
    name: &str,
    level: i16,
    upgrade_type: i8,
    current: &FinalizedLevels,
    node_id: i32,
) -> Option<String> {
    if !(UPGRADE..=UNSAFE_DOWNGRADE).contains(&upgrade_type) {
        return Some("The controller does not support the given upgrade type.".into());
    }
    let Some(f) = crate::features::find(name) else {
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
    let finalized = current.level(name);
    // Voters added at level 1 have no place in a static quorum: Kafka never lowers it.
    if name == "kraft.version" && level < finalized {
        return Some("Can't downgrade the version of this feature.".into());
    }
    if level < finalized && upgrade_type == UPGRADE {
        return Some(
            "Can't downgrade the version of this feature without setting the upgrade type to \
             either safe or unsafe downgrade."
                .into(),
        );
    }
    if level > finalized && upgrade_type != UPGRADE {
        return Some("Can't upgrade to a newer version with a downgrade upgrade type.".into());
    }
    None
}

/// The levels a request sets, or the answer refusing it.
fn plan(
    req: &UpdateFeaturesRequest,
    version: i16,
    current: &FinalizedLevels,
    node_id: i32,
) -> Result<BTreeMap<String, i16>, UpdateFeaturesResponse> {
    let mut changes = BTreeMap::new();
    for u in &req.feature_updates {
        let upgrade_type = match version {
            0 if u.allow_downgrade => SAFE_DOWNGRADE,
            0 => UPGRADE,
            _ => u.upgrade_type,
        };
        let level = u.max_version_level;
        if let Some(reason) = refusal(&u.feature, level, upgrade_type, current, node_id) {
            // One refused update fails them all, as in Kafka.
            let message = format!(
                "The update failed for all features since the following feature had an error: \
                 Invalid update version {level} for feature {}. {reason}",
                u.feature.as_str()
            );
            return Err(failure(ResponseError::InvalidUpdateVersion, message));
        }
        if level != current.level(&u.feature) {
            changes.insert(u.feature.to_string(), level);
        }
    }
    Ok(changes)
}

fn failure(error: ResponseError, message: String) -> UpdateFeaturesResponse {
    UpdateFeaturesResponse::default()
        .with_error_code(error.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

/// Success, with one NONE result per feature before v2 (v2 dropped them).
fn success(req: &UpdateFeaturesRequest, version: i16) -> UpdateFeaturesResponse {
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
        let broker = s.broker.clone();
        let current = broker.features.get();
        let changes = match plan(&r, version, &current, broker.config.node_id) {
            Ok(changes) => changes,
            Err(refused) => return Outcome::respond(refused),
        };
        if r.validate_only || changes.is_empty() {
            return Outcome::respond(success(&r, version));
        }
        let applied = blocking(move || broker.set_feature_levels(&changes)).await;
        match applied {
            Ok(Ok(())) => Outcome::respond(success(&r, version)),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot store finalized feature levels");
                Outcome::respond(failure(
                    ResponseError::UnknownServerError,
                    format!("cannot store the finalized feature levels: {e}"),
                ))
            }
            Err(_) => Outcome::respond(failure(
                ResponseError::UnknownServerError,
                "the feature update did not complete".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;

    use super::*;

    fn request(updates: &[(&'static str, i16, i8)]) -> UpdateFeaturesRequest {
        UpdateFeaturesRequest::default().with_feature_updates(
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
        )
    }

    /// The answer to `updates` at the default levels, and the levels it would set.
    fn update(
        version: i16,
        updates: &[(&'static str, i16, i8)],
    ) -> (UpdateFeaturesResponse, BTreeMap<String, i16>) {
        let req = request(updates);
        match plan(&req, version, &FinalizedLevels::default(), 1) {
            Ok(changes) => (success(&req, version), changes),
            Err(refused) => (refused, BTreeMap::new()),
        }
    }

    fn message(r: &UpdateFeaturesResponse) -> &str {
        r.error_message.as_deref().unwrap_or_default()
    }

    #[test]
    fn confirming_the_levels_in_force_changes_nothing_at_every_version() {
        for version in 0..=2 {
            let (r, changes) = update(
                version,
                &[
                    ("group.version", 1, UPGRADE),
                    ("transaction.version", 2, UPGRADE),
                ],
            );
            assert_eq!((r.error_code, r.error_message.as_deref()), (0, None));
            assert_eq!(r.results.len(), if version < 2 { 2 } else { 0 });
            assert!(r.results.iter().all(|x| x.error_code == 0));
            assert!(changes.is_empty());
        }
    }

    #[test]
    fn a_downgrade_needs_a_downgrade_type_and_is_planned() {
        let (r, changes) = update(2, &[("transaction.version", 1, SAFE_DOWNGRADE)]);
        assert_eq!(r.error_code, 0);
        assert_eq!(changes, BTreeMap::from([("transaction.version".into(), 1)]));
        // v0's allow_downgrade is a safe downgrade.
        let (_, changes) = update(0, &[("transaction.version", 0, SAFE_DOWNGRADE)]);
        assert_eq!(changes, BTreeMap::from([("transaction.version".into(), 0)]));
        let (r, _) = update(2, &[("transaction.version", 1, UPGRADE)]);
        assert!(message(&r).ends_with("Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."), "{}", message(&r));
        // From a downgraded level an upgrade is planned, a "downgrade" up is refused.
        let current =
            FinalizedLevels::default().with(&BTreeMap::from([("transaction.version".into(), 0)]));
        let up = request(&[("transaction.version", 2, UPGRADE)]);
        assert_eq!(
            plan(&up, 2, &current, 1).ok(),
            Some(BTreeMap::from([("transaction.version".into(), 2)]))
        );
        let wrong = request(&[("transaction.version", 2, SAFE_DOWNGRADE)]);
        let r = plan(&wrong, 2, &current, 1).unwrap_err();
        assert!(message(&r)
            .ends_with("Can't upgrade to a newer version with a downgrade upgrade type."));
    }

    #[test]
    fn levels_strata_lacks_are_refused_with_kafkas_errors() {
        let refused = ResponseError::InvalidUpdateVersion.code();
        let cases: &[(&[(&str, i16, i8)], &str)] = &[
            (&[("transaction.version", 3, UPGRADE)], "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2"),
            (&[("group.version", 0, SAFE_DOWNGRADE)], "only supports versions 1-1"),
            (&[("foo.version", 1, UPGRADE)], "Local controller 1 does not support this feature."),
            (&[("group.version", 1, 0)], "does not support the given upgrade type"),
            (&[("group.version", 1, UPGRADE), ("foo.version", 1, UPGRADE)], "feature foo.version"),
            (&[("kraft.version", 0, SAFE_DOWNGRADE)], "Can't downgrade the version of this feature."),
            (&[("kraft.version", 0, UNSAFE_DOWNGRADE)], "Can't downgrade the version of this feature."),
        ];
        for &(updates, expected) in cases {
            for version in 1..=2 {
                let (r, changes) = update(version, updates);
                assert_eq!(r.error_code, refused, "{updates:?}");
                assert!(message(&r).starts_with("The update failed for all features"));
                assert!(message(&r).contains(expected), "{}", message(&r));
                assert!(r.results.is_empty() && changes.is_empty());
            }
        }
    }

    #[test]
    fn api_versions_lists_zero_minimum_features_from_v4_and_finalizes_what_strata_implements() {
        let v3: Vec<_> = supported_features(3)
            .iter()
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(v3, ["group.version"]);
        assert_eq!(supported_features(4).len(), FEATURES.len());
        let levels = |l: &FinalizedLevels| -> Vec<(String, i16, i16)> {
            finalized_features(l)
                .iter()
                .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
                .collect()
        };
        let defaults = FinalizedLevels::default();
        assert_eq!(
            levels(&defaults),
            [
                ("group.version".to_string(), 1, 1),
                ("kraft.version".to_string(), 1, 1),
                ("share.version".to_string(), 2, 2),
                ("transaction.version".to_string(), 2, 2)
            ]
        );
        // A feature at level 0 is not finalized.
        let off = defaults.with(&BTreeMap::from([("transaction.version".into(), 0)]));
        assert_eq!(
            levels(&off),
            [
                ("group.version".to_string(), 1, 1),
                ("kraft.version".to_string(), 1, 1),
                ("share.version".to_string(), 2, 2)
            ]
        );
    }
}
