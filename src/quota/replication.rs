//! Replication throttles (KIP-73), as Kafka's `ReplicationQuotaManager` keeps them: the bytes
//! a leader serves to, and a follower fetches for, the throttled replicas of topics
//! (`leader.` / `follower.replication.throttled.replicas`) are measured on this broker and
//! held to `leader.` / `follower.replication.throttled.rate`. Only replicas outside the ISR
//! are held back (a reassignment's new replicas, a replica catching up after a restart), so
//! the ISR's traffic, and with it acks=all, never waits on a throttle.
//!
//! Held back means left out: a leader over its rate answers a throttled follower's partition
//! with no records (the fetch still records the follower's position), and a follower over its
//! rate leaves the partition out of its next fetch. Both record what they do send, so the
//! rate falls back under the limit and the partition moves again.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use super::rate::{Rate, SampleConfig};

/// One direction's throttle: a limit in bytes per second and the measured rate.
pub struct ReplicationQuota {
    limit: AtomicI64,
    rate: Mutex<Rate>,
    config: SampleConfig,
}

impl ReplicationQuota {
    fn new(config: SampleConfig) -> ReplicationQuota {
        ReplicationQuota {
            limit: AtomicI64::new(i64::MAX),
            rate: Mutex::new(Rate::default()),
            config,
        }
    }

    /// Bytes per second (`i64::MAX`: unlimited, Kafka's default).
    pub fn set_limit(&self, bytes_per_second: i64) {
        self.limit.store(bytes_per_second.max(0), Ordering::Relaxed);
    }

    pub fn limit(&self) -> i64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Whether the measured rate is above the limit (Kafka's `isQuotaExceeded`).
    pub fn is_exceeded(&self, now_ms: i64) -> bool {
        let limit = self.limit();
        limit != i64::MAX && self.measure(now_ms) > limit as f64
    }

    /// Counts bytes of throttled replicas sent or fetched.
    pub fn record(&self, bytes: usize, now_ms: i64) {
        if bytes > 0 {
            self.lock().record(self.config, bytes as f64, now_ms);
        }
    }

    /// The measured rate, bytes per second.
    pub fn measure(&self, now_ms: i64) -> f64 {
        self.lock().measure_simple(self.config, now_ms)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rate> {
        self.rate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The leader and the follower throttles of a broker.
pub struct ReplicationThrottles {
    pub leader: ReplicationQuota,
    pub follower: ReplicationQuota,
}

impl ReplicationThrottles {
    /// Unlimited, measured in `samples` windows of `window_ms`
    /// (`replication.quota.window.num`, `replication.quota.window.size.seconds`).
    pub fn new(samples: u32, window_ms: i64) -> ReplicationThrottles {
        let config = SampleConfig {
            samples: samples.max(1),
            window_ms: window_ms.max(1),
        };
        ReplicationThrottles {
            leader: ReplicationQuota::new(config),
            follower: ReplicationQuota::new(config),
        }
    }
}

impl Default for ReplicationThrottles {
    fn default() -> Self {
        ReplicationThrottles::new(
            SampleConfig::DEFAULT.samples,
            SampleConfig::DEFAULT.window_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlimited_throttle_is_never_exceeded() {
        let t = ReplicationThrottles::default();
        t.leader.record(usize::MAX / 2, 0);
        assert!(!t.leader.is_exceeded(1));
    }

    #[test]
    fn a_throttle_is_exceeded_after_one_windows_worth_and_recovers_as_time_passes() {
        let q = ReplicationThrottles::new(11, 1000).follower;
        q.set_limit(1000);
        // Kafka's SimpleRate divides by at least one window: 1,000 bytes at once is the limit.
        q.record(1000, 0);
        assert!(!q.is_exceeded(10));
        q.record(500, 20);
        assert!(q.is_exceeded(30), "1,500 bytes in the first second");
        // Nothing more is sent: the same bytes over a longer time fall under the limit.
        assert!(q.is_exceeded(1400));
        assert!(!q.is_exceeded(1600));
        // Raising the limit (a dynamic config) takes effect at once.
        q.record(5000, 1700);
        assert!(q.is_exceeded(1800));
        q.set_limit(i64::MAX);
        assert!(!q.is_exceeded(1800));
    }
}
