//! Client quota enforcement, as Kafka's `ClientQuotaManager` with its default callback.
//!
//! For each quota type (produce bytes, fetch bytes, request time) a (user, client-id) pair is
//! mapped to the metric tags of the most specific quota entity that has a quota of that type,
//! in Kafka's order of precedence:
//!
//! 1. user + client-id, 2. user + default client-id, 3. user, 4. default user + client-id,
//! 5. default user + default client-id, 6. default user, 7. client-id, 8. default client-id.
//!
//! All clients with the same tags share one sensor (a user quota is shared by all of the
//! user's client ids). Recording a value that pushes the sensor's rate over the quota returns
//! the throttle time. Sensors idle for an hour are dropped, as Kafka expires them.
//!
//! Concurrency: the quota limits are an immutable snapshot swapped on change; the sensors sit
//! behind one mutex held only for the arithmetic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::entity::{EntityName, QuotaKey, QuotaStore};
use super::rate::{Avg, QuotaSensor, SampleConfig};

/// Sensors unused for this long are dropped (Kafka's `InactiveSensorExpirationTimeSeconds`).
const INACTIVE_SENSOR_EXPIRATION_MS: i64 = 3600 * 1000;

/// The client quota types Strata enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaType {
    Produce,
    Fetch,
    Request,
}

impl QuotaType {
    pub const ALL: [QuotaType; 3] = [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request];

    pub fn key(self) -> QuotaKey {
        match self {
            QuotaType::Produce => QuotaKey::ProducerByteRate,
            QuotaType::Fetch => QuotaKey::ConsumerByteRate,
            QuotaType::Request => QuotaKey::RequestPercentage,
        }
    }

    /// Kafka's `QuotaType` name (the JMX `type` of the metrics).
    pub fn name(self) -> &'static str {
        match self {
            QuotaType::Produce => "Produce",
            QuotaType::Fetch => "Fetch",
            QuotaType::Request => "Request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The (user, client-id) tags of a sensor; an empty string means "not part of the quota".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricTags {
    pub user: String,
    pub client_id: String,
}

/// The quotas of one type, keyed by (user, client-id) entity parts.
#[derive(Debug, Default, Clone)]
struct TypeLimits {
    quotas: HashMap<(Option<EntityName>, Option<EntityName>), f64>,
}

impl TypeLimits {
    fn has(&self, user: Option<&EntityName>, client_id: Option<&EntityName>) -> bool {
        self.get(user, client_id).is_some()
    }

    fn get(&self, user: Option<&EntityName>, client_id: Option<&EntityName>) -> Option<f64> {
        self.quotas
            .get(&(user.cloned(), client_id.cloned()))
            .copied()
    }

    fn is_empty(&self) -> bool {
        self.quotas.is_empty()
    }

    /// Kafka's `quotaTypesEnabled` shortcut: with quotas at a single level, the tags are fixed
    /// without looking anything up.
    fn levels(&self) -> (bool, bool, bool) {
        let mut user_client = false;
        let mut user = false;
        let mut client = false;
        for (u, c) in self.quotas.keys() {
            match (u, c) {
                (Some(_), Some(_)) => user_client = true,
                (Some(_), None) => user = true,
                (None, Some(_)) => client = true,
                (None, None) => {}
            }
        }
        (user_client, user, client)
    }

    /// `DefaultQuotaCallback.quotaMetricTags`.
    fn metric_tags(&self, user: &str, client_id: &str) -> MetricTags {
        let tags = |u: &str, c: &str| MetricTags {
            user: u.to_string(),
            client_id: c.to_string(),
        };
        match self.levels() {
            (false, false, _) => return tags("", client_id),
            (false, true, false) => return tags(user, ""),
            (true, false, false) => return tags(user, client_id),
            _ => {}
        }
        let u = EntityName::Named(user.to_string());
        let c = EntityName::Named(client_id.to_string());
        let d = EntityName::Default;
        if self.has(Some(&u), Some(&c)) || self.has(Some(&u), Some(&d)) {
            tags(user, client_id)
        } else if self.has(Some(&u), None) {
            tags(user, "")
        } else if self.has(Some(&d), Some(&c)) || self.has(Some(&d), Some(&d)) {
            tags(user, client_id)
        } else if self.has(Some(&d), None) {
            tags(user, "")
        } else {
            tags("", client_id)
        }
    }

    /// `DefaultQuotaCallback.quotaLimit`: the quota of the entity the tags stand for.
    fn limit(&self, tags: &MetricTags) -> Option<f64> {
        let named = |s: &str| EntityName::Named(s.to_string());
        let d = EntityName::Default;
        let (user, client_id) = (tags.user.as_str(), tags.client_id.as_str());
        if !user.is_empty() && !client_id.is_empty() {
            let (u, c) = (named(user), named(client_id));
            self.get(Some(&u), Some(&c))
                .or_else(|| self.get(Some(&u), Some(&d)))
                .or_else(|| self.get(Some(&d), Some(&c)))
                .or_else(|| self.get(Some(&d), Some(&d)))
        } else if !user.is_empty() {
            self.get(Some(&named(user)), None)
                .or_else(|| self.get(Some(&d), None))
        } else if !client_id.is_empty() {
            self.get(None, Some(&named(client_id)))
                .or_else(|| self.get(None, Some(&d)))
        } else {
            None
        }
    }
}

/// The quota limits of every type, rebuilt from the store on change.
#[derive(Debug, Default, Clone)]
pub struct Limits {
    by_type: [TypeLimits; 3],
}

impl Limits {
    pub fn from_store(store: &QuotaStore) -> Limits {
        let mut limits = Limits::default();
        for (entity, values) in store.entries() {
            if entity.ip.is_some() {
                continue;
            }
            for t in QuotaType::ALL {
                if let Some(v) = values.get(&t.key()) {
                    limits.by_type[t.index()]
                        .quotas
                        .insert((entity.user.clone(), entity.client_id.clone()), *v);
                }
            }
        }
        limits
    }

    /// The tags of the sensor a client records into and the quota that applies to it.
    pub fn resolve(&self, t: QuotaType, user: &str, client_id: &str) -> (MetricTags, Option<f64>) {
        let l = &self.by_type[t.index()];
        let tags = l.metric_tags(user, client_id);
        let limit = l.limit(&tags);
        (tags, limit)
    }

    fn enabled(&self, t: QuotaType) -> bool {
        !self.by_type[t.index()].is_empty()
    }
}

struct ClientSensors {
    quota: QuotaSensor,
    throttle_time: Avg,
    last_record_ms: i64,
}

/// One sensor's figures for the metrics endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct SensorSnapshot {
    pub quota_type: QuotaType,
    pub tags: MetricTags,
    /// Bytes per second (Produce, Fetch) or percent of one thread (Request).
    pub rate: f64,
    pub quota: Option<f64>,
    /// Average throttle time (ms) of the throttled responses in the window.
    pub throttle_time_ms: f64,
    pub throttled_total: u64,
}

/// Client quota sensors and limits.
pub struct ClientQuotas {
    config: SampleConfig,
    limits: RwLock<Arc<Limits>>,
    sensors: Mutex<Sensors>,
}

#[derive(Default)]
struct Sensors {
    by_tags: HashMap<(QuotaType, MetricTags), ClientSensors>,
    throttled_total: HashMap<(QuotaType, MetricTags), u64>,
    last_expiry_ms: i64,
}

/// Who a request is accounted to.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// The principal's name (`alice` for `User:alice`).
    pub user: &'a str,
    pub client_id: &'a str,
}

impl ClientQuotas {
    pub fn new(config: SampleConfig, store: &QuotaStore) -> ClientQuotas {
        ClientQuotas {
            config,
            limits: RwLock::new(Arc::new(Limits::from_store(store))),
            sensors: Mutex::new(Sensors::default()),
        }
    }

    pub fn config(&self) -> SampleConfig {
        self.config
    }

    /// Takes new quota values; existing sensors keep their history and get the new limit.
    pub fn update(&self, store: &QuotaStore) {
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(Limits::from_store(store));
    }

    fn limits(&self) -> Arc<Limits> {
        self.limits
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True when some quota of this type is configured (Kafka records nothing otherwise).
    pub fn enabled(&self, t: QuotaType) -> bool {
        self.limits().enabled(t)
    }

    /// Records `value` for the client and returns the throttle time in ms (0 if within the
    /// quota). Byte quotas use Kafka's unbounded throttle time; the request quota bounds it by
    /// one quota window, as `ClientRequestQuotaManager` does.
    pub fn record(&self, t: QuotaType, client: Client<'_>, value: f64, now_ms: i64) -> i64 {
        let limits = self.limits();
        if !limits.enabled(t) {
            return 0;
        }
        let (tags, limit) = limits.resolve(t, client.user, client.client_id);
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        sensors.expire_idle(now_ms);
        let s = sensors.get_or_create(t, tags, now_ms);
        let violation = s.quota.record(self.config, limit, value, now_ms);
        match violation {
            None => 0,
            Some(v) if t == QuotaType::Request => v.bounded_throttle_time_ms(self.config.window_ms),
            Some(v) => v.throttle_time_ms(),
        }
        .max(0)
    }

    /// Takes back a recorded value (a throttled fetch returns no data, so its bytes do not
    /// count: Kafka's `unrecordQuotaSensor`).
    pub fn unrecord(&self, t: QuotaType, client: Client<'_>, value: f64, now_ms: i64) {
        let limits = self.limits();
        if !limits.enabled(t) {
            return;
        }
        let (tags, _) = limits.resolve(t, client.user, client.client_id);
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        let s = sensors.get_or_create(t, tags, now_ms);
        s.quota.record_unchecked(self.config, -value, now_ms);
    }

    /// Notes that the client's channel is throttled for `throttle_ms` because of quota `t`
    /// (the `throttle-time` metric).
    pub fn record_throttle(&self, t: QuotaType, client: Client<'_>, throttle_ms: i64, now_ms: i64) {
        let limits = self.limits();
        let (tags, _) = limits.resolve(t, client.user, client.client_id);
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        *sensors
            .throttled_total
            .entry((t, tags.clone()))
            .or_default() += 1;
        let s = sensors.get_or_create(t, tags, now_ms);
        s.throttle_time
            .record(self.config, throttle_ms as f64, now_ms);
    }

    /// The most a client may fetch in one response without being throttled for certain:
    /// quota x (samples - 1) x window (`getMaxValueInQuotaWindow`).
    pub fn max_value_in_window(&self, t: QuotaType, client: Client<'_>) -> Option<f64> {
        let limits = self.limits();
        let (_, limit) = limits.resolve(t, client.user, client.client_id);
        limit.map(|q| {
            q * (self.config.samples.saturating_sub(1)) as f64 * self.config.window_ms as f64
                / 1000.0
        })
    }

    /// Every live sensor, for the metrics endpoint.
    pub fn snapshot(&self, now_ms: i64) -> Vec<SensorSnapshot> {
        let limits = self.limits();
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        let throttled = sensors.throttled_total.clone();
        let mut out: Vec<SensorSnapshot> = sensors
            .by_tags
            .iter_mut()
            .map(|((t, tags), s)| SensorSnapshot {
                quota_type: *t,
                tags: tags.clone(),
                rate: s.quota.measure(self.config, now_ms),
                quota: limits.by_type[t.index()].limit(tags),
                throttle_time_ms: s.throttle_time.measure(self.config, now_ms),
                throttled_total: throttled.get(&(*t, tags.clone())).copied().unwrap_or(0),
            })
            .collect();
        out.sort_by(|a, b| (a.quota_type, &a.tags).cmp(&(b.quota_type, &b.tags)));
        out
    }
}

impl Sensors {
    fn get_or_create(&mut self, t: QuotaType, tags: MetricTags, now_ms: i64) -> &mut ClientSensors {
        let s = self
            .by_tags
            .entry((t, tags))
            .or_insert_with(|| ClientSensors {
                quota: QuotaSensor::default(),
                throttle_time: Avg::default(),
                last_record_ms: now_ms,
            });
        s.last_record_ms = now_ms;
        s
    }

    /// Drops sensors idle for an hour (checked at most once a minute).
    fn expire_idle(&mut self, now_ms: i64) {
        if now_ms - self.last_expiry_ms < 60_000 {
            return;
        }
        self.last_expiry_ms = now_ms;
        self.by_tags
            .retain(|_, s| now_ms - s.last_record_ms < INACTIVE_SENSOR_EXPIRATION_MS);
        let live: std::collections::HashSet<_> = self.by_tags.keys().cloned().collect();
        self.throttled_total.retain(|k, _| live.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::entity::Alteration;

    /// (entity as (type, name) pairs, key, value).
    type Spec<'a> = (&'a [(&'a str, Option<&'a str>)], &'a str, f64);

    fn store(items: &[Spec<'_>]) -> QuotaStore {
        let mut s = QuotaStore::default();
        for (entity, key, value) in items {
            let a = Alteration {
                entity: entity
                    .iter()
                    .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                    .collect(),
                ops: vec![(key.to_string(), Some(*value))],
            };
            s.apply(&QuotaStore::validate(&a, &|_| true).unwrap());
        }
        s
    }

    fn resolved(s: &QuotaStore, user: &str, client: &str) -> Option<(String, String, f64)> {
        let limits = Limits::from_store(s);
        let (tags, limit) = limits.resolve(QuotaType::Produce, user, client);
        limit.map(|l| (tags.user, tags.client_id, l))
    }

    const ALL_LEVELS: [Spec<'static>; 8] = [
        (
            &[("user", Some("alice")), ("client-id", Some("app"))],
            "producer_byte_rate",
            1.0,
        ),
        (
            &[("user", Some("alice")), ("client-id", None)],
            "producer_byte_rate",
            2.0,
        ),
        (&[("user", Some("alice"))], "producer_byte_rate", 3.0),
        (
            &[("user", None), ("client-id", Some("app"))],
            "producer_byte_rate",
            4.0,
        ),
        (
            &[("user", None), ("client-id", None)],
            "producer_byte_rate",
            5.0,
        ),
        (&[("user", None)], "producer_byte_rate", 6.0),
        (&[("client-id", Some("app"))], "producer_byte_rate", 7.0),
        (&[("client-id", None)], "producer_byte_rate", 8.0),
    ];

    #[test]
    fn resolution_follows_kafkas_precedence() {
        // Remove levels one at a time, most specific first: each time the next one applies.
        for skip in 0..ALL_LEVELS.len() {
            let s = store(&ALL_LEVELS[skip..]);
            let got = resolved(&s, "alice", "app").map(|(_, _, l)| l);
            assert_eq!(got, Some(skip as f64 + 1.0), "levels from {}", skip + 1);
        }
        // Sensors are shared at the level the quota comes from.
        let s = store(&ALL_LEVELS[2..]);
        assert_eq!(
            resolved(&s, "alice", "app"),
            Some(("alice".into(), "".into(), 3.0))
        );
        let s = store(&ALL_LEVELS[6..]);
        assert_eq!(
            resolved(&s, "alice", "other"),
            Some(("".into(), "other".into(), 8.0))
        );
    }

    #[test]
    fn single_level_quotas_use_fixed_tags() {
        // Only client-id quotas: every client is tagged by client id; others have no quota.
        let s = store(&[(&[("client-id", Some("app"))], "producer_byte_rate", 7.0)]);
        assert_eq!(
            resolved(&s, "alice", "app"),
            Some(("".into(), "app".into(), 7.0))
        );
        assert_eq!(resolved(&s, "alice", "other"), None);
        // Only user quotas.
        let s = store(&[(&[("user", Some("bob"))], "producer_byte_rate", 9.0)]);
        assert_eq!(
            resolved(&s, "bob", "x"),
            Some(("bob".into(), "".into(), 9.0))
        );
        assert_eq!(resolved(&s, "carol", "x"), None);
        // Quotas of another type do not apply.
        let s = store(&[(&[("user", Some("bob"))], "consumer_byte_rate", 9.0)]);
        assert_eq!(resolved(&s, "bob", "x"), None);
    }

    #[test]
    fn a_client_over_its_byte_quota_is_throttled_and_others_are_not() {
        let s = store(&[(&[("client-id", Some("slow"))], "producer_byte_rate", 1000.0)]);
        let q = ClientQuotas::new(SampleConfig::DEFAULT, &s);
        let slow = Client {
            user: "ANONYMOUS",
            client_id: "slow",
        };
        let fast = Client {
            user: "ANONYMOUS",
            client_id: "fast",
        };
        // 10 000 bytes at t=0 is exactly 1000 B/s over the 10 s minimum window.
        assert_eq!(q.record(QuotaType::Produce, slow, 10_000.0, 0), 0);
        // 5 000 more: 1500 B/s, 0.5 x 10 s = 5 s of throttling.
        assert_eq!(q.record(QuotaType::Produce, slow, 5_000.0, 0), 5000);
        assert_eq!(q.record(QuotaType::Produce, fast, 1e9, 0), 0);
        q.record_throttle(QuotaType::Produce, slow, 5000, 0);
        let snap = q.snapshot(0);
        assert_eq!(snap.len(), 2);
        let slow_snap = snap.iter().find(|s| s.tags.client_id == "slow").unwrap();
        assert_eq!(slow_snap.quota, Some(1000.0));
        assert_eq!(slow_snap.throttle_time_ms, 5000.0);
        assert_eq!(slow_snap.throttled_total, 1);
        // Fetch sizes are capped to what the window allows.
        assert_eq!(
            q.max_value_in_window(QuotaType::Produce, slow),
            Some(10_000.0)
        );
        assert_eq!(q.max_value_in_window(QuotaType::Produce, fast), None);
    }

    #[test]
    fn request_quota_throttle_is_bounded_by_one_window() {
        let s = store(&[(&[("user", None)], "request_percentage", 1.0)]);
        let q = ClientQuotas::new(SampleConfig::DEFAULT, &s);
        let c = Client {
            user: "alice",
            client_id: "x",
        };
        // 50 % of a thread for 10 s against a 1 % quota.
        assert_eq!(q.record(QuotaType::Request, c, 500.0, 0), 1000);
        assert!(!q.enabled(QuotaType::Produce));
        assert_eq!(q.record(QuotaType::Produce, c, 1e12, 0), 0);
    }

    #[test]
    fn unrecording_a_throttled_fetch_gives_the_bytes_back() {
        let s = store(&[(&[("client-id", None)], "consumer_byte_rate", 100.0)]);
        let q = ClientQuotas::new(SampleConfig::DEFAULT, &s);
        let c = Client {
            user: "u",
            client_id: "c",
        };
        assert!(q.record(QuotaType::Fetch, c, 5_000.0, 0) > 0);
        q.unrecord(QuotaType::Fetch, c, 5_000.0, 0);
        assert_eq!(q.record(QuotaType::Fetch, c, 1_000.0, 0), 0);
    }
}
