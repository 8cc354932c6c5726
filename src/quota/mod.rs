//! Client quotas and connection limits, with Kafka's model and arithmetic.
//!
//! - [`entity`]: quota entities and values, validation of AlterClientQuotas, describe filters,
//!   and the records persisted in the metadata file.
//! - [`rate`]: Kafka's windowed rate and the throttle-time formula.
//! - [`client`]: per (user, client-id) sensors for produce bytes, fetch bytes and request
//!   time, resolved with Kafka's precedence of quota entities.
//! - [`connection`]: `max.connections*` settings and `connection_creation_rate` IP quotas.
//! - [`request`]: a request's thread time and the `throttle_time_ms` of responses.
//!
//! Enforcement follows KIP-219: a response that pushes a client over a quota is sent at once
//! with `throttle_time_ms` set, and the connection then reads nothing more from the client
//! until that time has passed (the server's connection loop mutes it). Throttled fetches are
//! answered empty and their bytes are not counted.
//!
//! Invariants: the store is the only source of quota values; enforcement state is rebuilt from
//! it after every change. Crash consistency: changes are applied in memory after they were
//! validated, then the metadata file is rewritten atomically (temp file + rename), like SCRAM
//! credentials; a crash in between loses the change, which the client sees as a failed
//! request. Sensors are in memory only and start empty after a restart, as in Kafka.

pub mod client;
pub mod connection;
pub mod entity;
pub mod rate;
pub mod replication;
pub mod request;

use std::fmt::Write;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::protocol::Encodable;

pub use client::{Client, ClientQuotas, QuotaType};
pub use connection::{ConnectionLimits, ConnectionLimitsConfig, ConnectionPermit, Refusal};
pub use entity::{Alteration, Change, DescribedQuotas, FilterComponent, QuotaEntity};
pub use entity::{EntityRecord, QuotaRecord, QuotaStore};
pub use entity::{QuotaError, QuotaKey};
pub use rate::SampleConfig;

/// The broker's client quotas and connection limits.
pub struct Quotas {
    store: RwLock<QuotaStore>,
    pub clients: ClientQuotas,
    pub connections: Arc<ConnectionLimits>,
    clock: Instant,
}

impl Quotas {
    /// Loads the persisted quotas. Blocking: IP quotas given as host names are resolved.
    pub fn open(
        sample: SampleConfig,
        connections: ConnectionLimitsConfig,
        records: &[QuotaRecord],
    ) -> Quotas {
        let store = QuotaStore::from_records(records);
        let quotas = Quotas {
            clients: ClientQuotas::new(sample, &store),
            connections: ConnectionLimits::new(connections, &store),
            store: RwLock::new(store),
            clock: Instant::now(),
        };
        quotas.refresh();
        quotas
    }

    /// Milliseconds on the quota clock (monotonic).
    pub fn now_ms(&self) -> i64 {
        self.clock.elapsed().as_millis() as i64
    }

    /// DescribeClientQuotas.
    pub fn describe(
        &self,
        components: &[FilterComponent],
        strict: bool,
    ) -> Result<DescribedQuotas, QuotaError> {
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .describe(components, strict)
    }

    /// Validates one AlterClientQuotas entry. Blocking: an IP entity's host name must resolve.
    pub fn validate(&self, alteration: &Alteration) -> Result<Change, QuotaError> {
        QuotaStore::validate(alteration, &|host| {
            host.parse::<IpAddr>().is_ok() || !resolve_host(host).is_empty()
        })
    }

    /// Applies validated changes and updates enforcement; returns whether anything changed.
    /// Blocking (host-name IP entities are resolved). The caller persists the store.
    pub fn apply(&self, changes: &[Change]) -> bool {
        let changed = {
            let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
            let mut changed = false;
            for c in changes {
                changed |= store.apply(c);
            }
            changed
        };
        if changed {
            self.refresh();
        }
        changed
    }

    /// The records the store would hold after `changes`, without applying them (cluster
    /// mode proposes the difference to the quorum).
    pub fn preview(&self, changes: &[Change]) -> Vec<QuotaRecord> {
        let mut store = self.store.read().unwrap_or_else(|e| e.into_inner()).clone();
        for c in changes {
            store.apply(c);
        }
        store.to_records()
    }

    /// Replaces every quota with `records` (the quorum's) and updates enforcement. Blocking
    /// (host-name IP entities are resolved).
    pub fn replace(&self, records: &[QuotaRecord]) {
        *self.store.write().unwrap_or_else(|e| e.into_inner()) = QuotaStore::from_records(records);
        self.refresh();
    }

    fn refresh(&self) {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner()).clone();
        self.clients.update(&store);
        self.connections.update(&store, &resolve_host);
    }

    /// The quotas as persisted in the metadata file.
    pub fn records(&self) -> Vec<QuotaRecord> {
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .to_records()
    }

    /// Records what a request cost its client and returns how long to mute the connection
    /// after the response (0: not throttled). Sets `throttle_time_ms` on the response, and
    /// empties a fetch response that is throttled. `response` is None for a produce with
    /// acks=0, which gets no response but still counts.
    pub fn throttle(
        &self,
        cost: &RequestCost<'_>,
        response: Option<&mut ResponseKind>,
    ) -> Duration {
        let clients = &self.clients;
        let now = self.now_ms();
        let client = cost.client;
        let percent = request::thread_time_percent(cost.thread_time);
        let mut response = response;
        let (bandwidth, request_throttle) = match cost.api_key {
            ApiKey::Produce => {
                let size = cost.request_size as f64;
                let bandwidth = clients.record(QuotaType::Produce, client, size, now);
                // acks=0: no response, so no request-time throttling (as Kafka).
                let request = match response {
                    Some(_) => clients.record(QuotaType::Request, client, percent, now),
                    None => 0,
                };
                (Some((QuotaType::Produce, bandwidth)), request)
            }
            ApiKey::Fetch => {
                let request = clients.record(QuotaType::Request, client, percent, now);
                match response.as_deref_mut() {
                    Some(ResponseKind::Fetch(fetch)) => {
                        let size = fetch.compute_size(cost.version).unwrap_or(0) as f64;
                        let bandwidth = clients.record(QuotaType::Fetch, client, size, now);
                        if bandwidth.max(request) > 0 {
                            // A throttled fetch returns no data: its bytes do not count.
                            clients.unrecord(QuotaType::Fetch, client, size, now);
                            fetch.responses.clear();
                        }
                        (Some((QuotaType::Fetch, bandwidth)), request)
                    }
                    _ => (None, request),
                }
            }
            _ => (
                None,
                clients.record(QuotaType::Request, client, percent, now),
            ),
        };
        let (quota_type, throttle_ms) = match bandwidth {
            Some((t, ms)) if ms > request_throttle => (t, ms),
            _ => (QuotaType::Request, request_throttle),
        };
        if throttle_ms <= 0 {
            return Duration::ZERO;
        }
        clients.record_throttle(quota_type, client, throttle_ms, now);
        if let Some(r) = response {
            request::set_throttle_time(r, throttle_ms.min(i32::MAX as i64) as i32);
        }
        tracing::debug!(
            user = client.user,
            client_id = client.client_id,
            quota = quota_type.name(),
            throttle_ms,
            "client over quota: throttled"
        );
        Duration::from_millis(throttle_ms as u64)
    }

    /// Appends the quota metrics in Prometheus format, with Kafka's metric names under a
    /// `strata_client_quota_` prefix and Kafka's `user` / `client-id` tags.
    pub fn render_metrics(&self, out: &mut String) {
        let now = self.now_ms();
        let sensors = self.clients.snapshot(now);
        let series: [(&str, &str, &str); 4] = [
            (
                "strata_client_quota_byte_rate",
                "gauge",
                "Bytes per second per user/client-id (Kafka's byte-rate, types Produce and Fetch).",
            ),
            (
                "strata_client_quota_request_time_percent",
                "gauge",
                "Request handler time per user/client-id, percent of one thread (Kafka's request-time).",
            ),
            (
                "strata_client_quota_throttle_time_ms",
                "gauge",
                "Average throttle time of throttled responses in the quota window (Kafka's throttle-time).",
            ),
            (
                "strata_client_quota_limit",
                "gauge",
                "The quota that applies to the user/client-id (bytes/s, or percent for Request).",
            ),
        ];
        for (name, kind, help) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for s in &sensors {
                let labels = format!(
                    "type=\"{}\",user=\"{}\",client_id=\"{}\"",
                    s.quota_type.name(),
                    escape_label(&s.tags.user),
                    escape_label(&s.tags.client_id)
                );
                let value = match name {
                    "strata_client_quota_byte_rate" if s.quota_type != QuotaType::Request => {
                        Some(s.rate)
                    }
                    "strata_client_quota_request_time_percent"
                        if s.quota_type == QuotaType::Request =>
                    {
                        Some(s.rate)
                    }
                    "strata_client_quota_throttle_time_ms" => Some(s.throttle_time_ms),
                    "strata_client_quota_limit" => s.quota,
                    _ => None,
                };
                if let Some(v) = value {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        }
        let name = "strata_client_quota_throttled_total";
        let _ = writeln!(
            out,
            "# HELP {name} Responses throttled per user/client-id and quota type.\n# TYPE {name} counter"
        );
        for s in &sensors {
            let _ = writeln!(
                out,
                "{name}{{type=\"{}\",user=\"{}\",client_id=\"{}\"}} {}",
                s.quota_type.name(),
                escape_label(&s.tags.user),
                escape_label(&s.tags.client_id),
                s.throttled_total
            );
        }
        let c = self.connections.stats();
        let _ = writeln!(
            out,
            "# HELP strata_connection_creation_rate New connections per second (Kafka's connection-creation-rate).\n# TYPE strata_connection_creation_rate gauge\nstrata_connection_creation_rate {}",
            c.creation_rate
        );
        let _ = writeln!(
            out,
            "# HELP strata_connections_refused_total Connections refused by a connection limit.\n# TYPE strata_connections_refused_total counter\nstrata_connections_refused_total{{reason=\"max.connections.per.ip\"}} {}\nstrata_connections_refused_total{{reason=\"connection_creation_rate\"}} {}",
            c.refused_per_ip_limit, c.throttled_per_ip_rate
        );
    }
}

/// What one request cost, for [`Quotas::throttle`].
pub struct RequestCost<'a> {
    pub client: Client<'a>,
    pub api_key: ApiKey,
    pub version: i16,
    /// Size of the request frame (what Kafka counts against `producer_byte_rate`).
    pub request_size: usize,
    pub thread_time: Duration,
}

/// The user name Kafka's quotas use: the principal's name (`alice` for `User:alice`).
pub fn user_of(principal: &str) -> &str {
    principal
        .split_once(':')
        .map_or(principal, |(_, name)| name)
}

/// Resolves a host name (blocking DNS). An unresolvable name resolves to nothing.
fn resolve_host(host: &str) -> Vec<IpAddr> {
    (host, 0)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).collect())
        .unwrap_or_default()
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_the_principal_name() {
        assert_eq!(user_of("User:alice"), "alice");
        assert_eq!(user_of("User:ANONYMOUS"), "ANONYMOUS");
        assert_eq!(user_of("CN=x"), "CN=x");
    }
}
