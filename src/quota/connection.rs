//! Connection limits, as Kafka's `ConnectionQuotas`: a broker-wide cap (`max.connections`)
//! and creation rate (`max.connection.creation.rate`), a per-IP cap
//! (`max.connections.per.ip`, `max.connections.per.ip.overrides`) and the per-IP creation
//! rate quota (`connection_creation_rate` on `ip` entities).
//!
//! Order of checks when a connection is accepted, as in Kafka:
//! 1. The broker-wide rate is recorded; over it, accepting waits the throttle time (at most
//!    one quota window). Accepting also waits while `max.connections` are open.
//! 2. The IP's creation rate quota: over it, the connection is not admitted; the caller
//!    closes it after the throttle time (Kafka's delayed close), and it is not counted.
//! 3. The IP's connection count: at the limit, the connection is closed at once.
//!
//! An admitted connection holds a [`ConnectionPermit`]; dropping it frees the slot.
//! Concurrency: one mutex over counts and sensors, never held across an await.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::entity::{EntityName, QuotaKey, QuotaStore};
use super::rate::{QuotaSensor, SampleConfig};

/// Kafka's "no limit" for the int-valued connection settings.
pub const UNLIMITED: i32 = i32::MAX;

/// The broker settings of connection limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionLimitsConfig {
    /// `max.connections.per.ip`.
    pub max_per_ip: i32,
    /// `max.connections.per.ip.overrides`, host names resolved.
    pub per_ip_overrides: HashMap<IpAddr, i32>,
    /// `max.connections`.
    pub max_connections: i32,
    /// `max.connection.creation.rate` (per second).
    pub max_creation_rate: i32,
    pub sample: SampleConfig,
}

impl Default for ConnectionLimitsConfig {
    fn default() -> Self {
        ConnectionLimitsConfig {
            max_per_ip: UNLIMITED,
            per_ip_overrides: HashMap::new(),
            max_connections: UNLIMITED,
            max_creation_rate: UNLIMITED,
            sample: SampleConfig::DEFAULT,
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The IP already has `max` connections: close now.
    TooManyFromIp { max: i32 },
    /// The IP's connection creation rate is over its quota: close after the delay.
    Throttled { delay: Duration },
}

struct State {
    /// The `max.connections*` settings (changed at run time by dynamic broker configs).
    config: ConnectionLimitsConfig,
    counts: HashMap<IpAddr, i32>,
    total: i32,
    broker_rate: QuotaSensor,
    ip_rates: HashMap<IpAddr, QuotaSensor>,
    /// `connection_creation_rate` of specific IPs, and of `<default>`.
    ip_rate_quotas: HashMap<IpAddr, i32>,
    default_ip_rate_quota: i32,
    refused_per_ip: u64,
    throttled_per_ip: u64,
}

pub struct ConnectionLimits {
    state: Mutex<State>,
    slot_freed: Notify,
    clock: Instant,
}

/// An admitted connection's place in the counts.
pub struct ConnectionPermit {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.limits.release(self.ip);
    }
}

/// Counters for the metrics endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConnectionLimitStats {
    pub refused_per_ip_limit: u64,
    pub throttled_per_ip_rate: u64,
    pub creation_rate: f64,
}

impl ConnectionLimits {
    pub fn new(config: ConnectionLimitsConfig, store: &QuotaStore) -> Arc<ConnectionLimits> {
        let limits = Arc::new(ConnectionLimits {
            state: Mutex::new(State {
                config,
                counts: HashMap::new(),
                total: 0,
                broker_rate: QuotaSensor::default(),
                ip_rates: HashMap::new(),
                ip_rate_quotas: HashMap::new(),
                default_ip_rate_quota: UNLIMITED,
                refused_per_ip: 0,
                throttled_per_ip: 0,
            }),
            slot_freed: Notify::new(),
            clock: Instant::now(),
        });
        limits.update(store, &|_| Vec::new());
        limits
    }

    fn now_ms(&self) -> i64 {
        self.clock.elapsed().as_millis() as i64
    }

    /// Takes new `connection_creation_rate` quotas. `resolve(host)` turns an IP entity that is
    /// a host name into addresses (blocking DNS: call off the async workers).
    pub fn update(&self, store: &QuotaStore, resolve: &dyn Fn(&str) -> Vec<IpAddr>) {
        let mut per_ip = HashMap::new();
        let mut default = UNLIMITED;
        for (entity, values) in store.entries() {
            let Some(ip) = &entity.ip else { continue };
            let Some(rate) = values.get(&QuotaKey::ConnectionCreationRate) else {
                continue;
            };
            let rate = rate.clamp(0.0, UNLIMITED as f64) as i32;
            match ip {
                EntityName::Default => default = rate,
                EntityName::Named(host) => {
                    let addrs = match host.parse::<IpAddr>() {
                        Ok(a) => vec![a],
                        Err(_) => resolve(host),
                    };
                    for a in addrs {
                        per_ip.insert(a, rate);
                    }
                }
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.ip_rate_quotas = per_ip;
        state.default_ip_rate_quota = default;
    }

    /// Admits a connection from `ip`, waiting (as Kafka's acceptor does) while the broker-wide
    /// creation rate is exceeded or `max.connections` are open.
    pub async fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let throttle_ms = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = self.now_ms();
            self.record_broker_connection(&mut state, now)
        };
        if throttle_ms > 0 {
            tokio::time::sleep(Duration::from_millis(throttle_ms as u64)).await;
        }
        loop {
            let freed = self.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if state.total < state.config.max_connections {
                    let now = self.now_ms();
                    return self
                        .admit_ip(&mut state, ip, now)
                        .map(|()| ConnectionPermit {
                            limits: self.clone(),
                            ip,
                        });
                }
            }
            freed.await;
        }
    }

    /// The broker-wide rate sensor; returns the throttle time, bounded by one window.
    fn record_broker_connection(&self, state: &mut State, now_ms: i64) -> i64 {
        let c = &state.config;
        let bound = Some(c.max_creation_rate as f64).filter(|_| c.max_creation_rate != UNLIMITED);
        let sample = c.sample;
        state
            .broker_rate
            .record(sample, bound, 1.0, now_ms)
            .map_or(0, |v| v.bounded_throttle_time_ms(sample.window_ms))
    }

    /// Steps 2 and 3: the IP's creation rate and connection count; counts it if admitted.
    fn admit_ip(&self, state: &mut State, ip: IpAddr, now_ms: i64) -> Result<(), Refusal> {
        let rate_quota = state
            .ip_rate_quotas
            .get(&ip)
            .copied()
            .unwrap_or(state.default_ip_rate_quota);
        if rate_quota != UNLIMITED {
            let sample = state.config.sample;
            let sensor = state.ip_rates.entry(ip).or_default();
            if let Some(v) = sensor.record(sample, Some(rate_quota as f64), 1.0, now_ms) {
                let delay_ms = v.bounded_throttle_time_ms(sample.window_ms).max(0);
                // Not accepted: take the connection back out of the rates.
                sensor.record_unchecked(sample, -1.0, now_ms);
                state.broker_rate.record_unchecked(sample, -1.0, now_ms);
                state.throttled_per_ip += 1;
                return Err(Refusal::Throttled {
                    delay: Duration::from_millis(delay_ms as u64),
                });
            }
        }
        let max = state
            .config
            .per_ip_overrides
            .get(&ip)
            .copied()
            .unwrap_or(state.config.max_per_ip);
        let count = state.counts.get(&ip).copied().unwrap_or(0);
        if count >= max {
            state.refused_per_ip += 1;
            return Err(Refusal::TooManyFromIp { max });
        }
        state.counts.insert(ip, count + 1);
        state.total += 1;
        Ok(())
    }

    fn release(&self, ip: IpAddr) {
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match state.counts.get(&ip).copied() {
                Some(n) if n > 1 => {
                    state.counts.insert(ip, n - 1);
                }
                Some(_) => {
                    state.counts.remove(&ip);
                }
                None => tracing::error!(%ip, "connection count underflow"),
            }
            state.total = (state.total - 1).max(0);
            // Idle per-IP rate sensors go once their window has passed.
            let now = self.now_ms();
            let sample = state.config.sample;
            state.ip_rates.retain(|_, s| !s.is_idle(sample, now));
        }
        self.slot_freed.notify_waiters();
    }

    /// New `max.connections*` settings (a dynamic broker config). Open connections stay; a
    /// raised `max.connections` admits the ones waiting at once.
    pub fn set_config(&self, config: ConnectionLimitsConfig) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).config = config;
        self.slot_freed.notify_waiters();
    }

    /// Open connections from `ip`.
    pub fn count(&self, ip: IpAddr) -> i32 {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.counts.get(&ip).copied().unwrap_or(0)
    }

    pub fn stats(&self) -> ConnectionLimitStats {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.now_ms();
        let sample = state.config.sample;
        ConnectionLimitStats {
            refused_per_ip_limit: state.refused_per_ip,
            throttled_per_ip_rate: state.throttled_per_ip,
            creation_rate: state.broker_rate.measure(sample, now),
        }
    }
}

/// Parses `max.connections.per.ip.overrides`: `host:count,host:count` (Kafka's CSV map).
pub fn parse_per_ip_overrides(text: &str) -> Result<Vec<(String, i32)>, String> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, count) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("expected host:count, got {item:?}"))?;
        let count: i32 = count
            .trim()
            .parse()
            .map_err(|_| format!("{count:?} is not a connection count"))?;
        if count < 0 {
            return Err(format!("connection count {count} for {host} is negative"));
        }
        out.push((host.trim().to_string(), count));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::entity::Alteration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn store_with_rate(entity: Option<&str>, rate: f64) -> QuotaStore {
        let mut s = QuotaStore::default();
        let a = Alteration {
            entity: vec![("ip".into(), entity.map(str::to_string))],
            ops: vec![("connection_creation_rate".into(), Some(rate))],
        };
        s.apply(&QuotaStore::validate(&a, &|_| true).unwrap());
        s
    }

    #[tokio::test]
    async fn the_per_ip_limit_refuses_the_extra_connection_and_frees_on_close() {
        let mut config = ConnectionLimitsConfig {
            max_per_ip: 2,
            ..Default::default()
        };
        config.per_ip_overrides.insert(ip("10.0.0.9"), 0);
        let limits = ConnectionLimits::new(config, &QuotaStore::default());
        let a = limits.admit(ip("10.0.0.1")).await.unwrap();
        let _b = limits.admit(ip("10.0.0.1")).await.unwrap();
        assert_eq!(
            limits.admit(ip("10.0.0.1")).await.err(),
            Some(Refusal::TooManyFromIp { max: 2 })
        );
        assert!(limits.admit(ip("10.0.0.2")).await.is_ok());
        assert_eq!(
            limits.admit(ip("10.0.0.9")).await.err(),
            Some(Refusal::TooManyFromIp { max: 0 })
        );
        drop(a);
        assert_eq!(limits.count(ip("10.0.0.1")), 1);
        assert!(limits.admit(ip("10.0.0.1")).await.is_ok());
        assert_eq!(limits.stats().refused_per_ip_limit, 2);
    }

    #[tokio::test]
    async fn an_ip_over_its_creation_rate_is_throttled_without_being_counted() {
        // 1 connection/s over the 10 s minimum window: the 11th in a burst is over.
        let limits = ConnectionLimits::new(
            ConnectionLimitsConfig::default(),
            &store_with_rate(Some("10.0.0.1"), 1.0),
        );
        let mut permits = Vec::new();
        for _ in 0..10 {
            permits.push(limits.admit(ip("10.0.0.1")).await.unwrap());
        }
        match limits.admit(ip("10.0.0.1")).await {
            Err(Refusal::Throttled { delay }) => {
                assert!(delay > Duration::ZERO && delay <= Duration::from_secs(1))
            }
            other => panic!("expected a throttle, got {:?}", other.err()),
        }
        assert_eq!(limits.count(ip("10.0.0.1")), 10);
        // Other IPs have no quota.
        assert!(limits.admit(ip("10.0.0.2")).await.is_ok());
        // The default applies to IPs without their own quota.
        let limits = ConnectionLimits::new(
            ConnectionLimitsConfig::default(),
            &store_with_rate(None, 1.0),
        );
        for _ in 0..10 {
            permits.push(limits.admit(ip("10.1.1.1")).await.unwrap());
        }
        assert!(matches!(
            limits.admit(ip("10.1.1.1")).await,
            Err(Refusal::Throttled { .. })
        ));
    }

    #[tokio::test]
    async fn max_connections_makes_accepting_wait_for_a_free_slot() {
        let limits = ConnectionLimits::new(
            ConnectionLimitsConfig {
                max_connections: 1,
                ..Default::default()
            },
            &QuotaStore::default(),
        );
        let first = limits.admit(ip("10.0.0.1")).await.unwrap();
        let l2 = limits.clone();
        let waiting = tokio::spawn(async move { l2.admit(ip("10.0.0.2")).await.is_ok() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(first);
        assert!(waiting.await.unwrap());
    }

    #[test]
    fn overrides_parse_like_kafkas_csv_map() {
        assert_eq!(
            parse_per_ip_overrides("127.0.0.1:5, host.example:0").unwrap(),
            vec![("127.0.0.1".into(), 5), ("host.example".into(), 0)]
        );
        assert_eq!(parse_per_ip_overrides("").unwrap(), vec![]);
        assert!(parse_per_ip_overrides("127.0.0.1").is_err());
        assert!(parse_per_ip_overrides("127.0.0.1:x").is_err());
    }
}
