//! What the group coordinator reports about its groups: their list and types (ListGroups)
//! and the gauges of /metrics.

use super::GroupCoordinator;

impl GroupCoordinator {
    /// The type of a group this coordinator knows: "classic", "consumer" or "share".
    pub fn group_type(&self, group_id: &str) -> Option<&'static str> {
        self.groups()
            .get(group_id)
            .map(|g| match (&g.consumer, &g.share) {
                (Some(_), _) => "consumer",
                (_, Some(_)) => "share",
                _ => "classic",
            })
    }

    /// (group id, protocol type, state, group type "classic", "consumer" or "share") of every
    /// group.
    pub fn list(&self) -> Vec<(String, String, &'static str, &'static str)> {
        let mut v: Vec<_> = self
            .groups()
            .values()
            .filter(|g| self.check_coordinator(&g.id).is_ok())
            .map(|g| {
                (
                    g.id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    match (&g.consumer, &g.share) {
                        (Some(c), _) => c.state_name(),
                        (_, Some(s)) => s.state_name(),
                        _ => g.state.name(),
                    },
                    match (&g.consumer, &g.share) {
                        (Some(_), _) => "consumer",
                        (_, Some(_)) => "share",
                        _ => "classic",
                    },
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Gauges for /metrics: groups per (type, state), members, and rebalances so far.
    pub fn gauges(&self) -> crate::metrics::GroupGauges {
        let groups = self.groups();
        let mut by_state: std::collections::BTreeMap<(&'static str, &'static str), usize> =
            Default::default();
        let mut members = 0;
        let mut rebalances = self
            .removed_rebalances
            .load(std::sync::atomic::Ordering::Relaxed);
        for g in groups.values() {
            let (kind, state) = match (&g.consumer, &g.share) {
                (Some(c), _) => ("consumer", c.state_name()),
                (_, Some(s)) => ("share", s.state_name()),
                _ => ("classic", g.state.name()),
            };
            *by_state.entry((kind, state)).or_default() += 1;
            members += g.members.len()
                + g.consumer.as_ref().map(|c| c.members.len()).unwrap_or(0)
                + g.share.as_ref().map(|s| s.members.len()).unwrap_or(0);
            rebalances += g.rebalances
                + g.consumer.as_ref().map(|c| c.rebalances).unwrap_or(0)
                + g.share.as_ref().map(|s| s.rebalances).unwrap_or(0);
        }
        crate::metrics::GroupGauges {
            by_state: by_state.into_iter().map(|((k, s), n)| (k, s, n)).collect(),
            members,
            rebalances,
        }
    }
}
