//! Kafka's windowed statistics (`SampledStat`, `Rate`, `Avg`) and the quota throttle-time
//! formula (`QuotaUtils.throttleTime`), as pure functions of the time passed in.
//!
//! A stat keeps `samples + 1` samples of `window_ms` each (one extra for the sample that
//! overlaps the start of the measured window). A sample with no event for `samples *
//! window_ms` is reset. A rate divides the sum of the retained samples by the elapsed time
//! since the oldest sample started, but never by less than `samples - 1` whole windows, so a
//! new client is not judged on its first milliseconds.

/// How a stat is sampled: Kafka's `quota.window.num` and `quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleConfig {
    pub samples: u32,
    pub window_ms: i64,
}

impl SampleConfig {
    /// Kafka's defaults: 11 samples of 1 s (10 whole windows and the current one).
    pub const DEFAULT: SampleConfig = SampleConfig {
        samples: 11,
        window_ms: 1000,
    };
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    event_count: u64,
    start_ms: i64,
    last_event_ms: i64,
}

impl Sample {
    fn new(now_ms: i64) -> Sample {
        Sample {
            value: 0.0,
            event_count: 0,
            start_ms: now_ms,
            last_event_ms: now_ms,
        }
    }

    fn reset(&mut self, now_ms: i64) {
        *self = Sample::new(now_ms);
    }

    fn is_complete(&self, now_ms: i64, config: SampleConfig) -> bool {
        now_ms - self.start_ms >= config.window_ms
    }
}

/// Kafka's `SampledStat` with a windowed sum: the building block of [`Rate`] and [`Avg`].
#[derive(Debug, Clone, Default)]
struct SampledSum {
    samples: Vec<Sample>,
    current: usize,
}

impl SampledSum {
    fn record(&mut self, config: SampleConfig, value: f64, now_ms: i64) {
        let mut index = self.current_index(now_ms);
        if self.samples[index].is_complete(now_ms, config) {
            index = self.advance(config, now_ms);
        }
        let sample = &mut self.samples[index];
        sample.value += value;
        sample.event_count += 1;
        sample.last_event_ms = now_ms;
    }

    fn current_index(&mut self, now_ms: i64) -> usize {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
        }
        self.current
    }

    fn advance(&mut self, config: SampleConfig, now_ms: i64) -> usize {
        let max_samples = config.samples as usize + 1;
        self.current = (self.current + 1) % max_samples;
        if self.current >= self.samples.len() {
            self.samples.push(Sample::new(now_ms));
        } else {
            self.samples[self.current].reset(now_ms);
        }
        self.current
    }

    /// Resets samples without an event in the whole monitored window.
    fn purge_obsolete(&mut self, config: SampleConfig, now_ms: i64) {
        let expire_age = config.samples as i64 * config.window_ms;
        for s in &mut self.samples {
            if now_ms - s.last_event_ms >= expire_age {
                s.reset(now_ms);
            }
        }
    }

    fn oldest_start(&mut self, now_ms: i64) -> i64 {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
        }
        self.samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms)
    }

    fn sum(&mut self, config: SampleConfig, now_ms: i64) -> f64 {
        self.purge_obsolete(config, now_ms);
        self.samples.iter().map(|s| s.value).sum()
    }

    fn count(&mut self, config: SampleConfig, now_ms: i64) -> u64 {
        self.purge_obsolete(config, now_ms);
        self.samples.iter().map(|s| s.event_count).sum()
    }
}

/// Kafka's `Rate` (per second) over a windowed sum.
#[derive(Debug, Clone, Default)]
pub struct Rate {
    stat: SampledSum,
}

impl Rate {
    pub fn record(&mut self, config: SampleConfig, value: f64, now_ms: i64) {
        self.stat.record(config, value, now_ms);
    }

    /// The rate per second at `now_ms`.
    pub fn measure(&mut self, config: SampleConfig, now_ms: i64) -> f64 {
        let sum = self.stat.sum(config, now_ms);
        sum / (self.window_size_ms(config, now_ms) as f64 / 1000.0)
    }

    /// Kafka's `SimpleRate` (replication throttles): the sum over the time since the oldest
    /// retained sample started, but at least one window, so a rate is reached after one
    /// window's worth of traffic rather than `samples - 1` windows'.
    pub fn measure_simple(&mut self, config: SampleConfig, now_ms: i64) -> f64 {
        let sum = self.stat.sum(config, now_ms);
        let elapsed = now_ms - self.stat.oldest_start(now_ms);
        sum / (elapsed.max(config.window_ms).max(1) as f64 / 1000.0)
    }

    /// The time the rate is measured over (`Rate.windowSize`): since the oldest retained
    /// sample started, at least `samples - 1` whole windows, at least 1 ms.
    pub fn window_size_ms(&mut self, config: SampleConfig, now_ms: i64) -> i64 {
        self.stat.purge_obsolete(config, now_ms);
        let mut elapsed = now_ms - self.stat.oldest_start(now_ms);
        let full_windows = elapsed / config.window_ms;
        let min_full_windows = config.samples as i64 - 1;
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * config.window_ms;
        }
        elapsed.max(1)
    }

    /// True when every retained sample is older than the monitored window.
    pub fn is_idle(&self, config: SampleConfig, now_ms: i64) -> bool {
        let expire_age = config.samples as i64 * config.window_ms;
        self.stat
            .samples
            .iter()
            .all(|s| s.event_count == 0 || now_ms - s.last_event_ms >= expire_age)
    }
}

/// Kafka's `Avg` over the same windows (the throttle-time metrics), 0 without events.
#[derive(Debug, Clone, Default)]
pub struct Avg {
    stat: SampledSum,
}

impl Avg {
    pub fn record(&mut self, config: SampleConfig, value: f64, now_ms: i64) {
        self.stat.record(config, value, now_ms);
    }

    pub fn measure(&mut self, config: SampleConfig, now_ms: i64) -> f64 {
        let count = self.stat.count(config, now_ms);
        if count == 0 {
            return 0.0;
        }
        self.stat.sum(config, now_ms) / count as f64
    }
}

/// A rate with an upper bound, like a Kafka `Sensor` with a quota: recording a value returns
/// the throttle time when the rate after the record exceeds the bound.
#[derive(Debug, Clone, Default)]
pub struct QuotaSensor {
    rate: Rate,
}

/// A recorded value pushed the rate over its bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Violation {
    /// The measured rate, including the value just recorded.
    pub value: f64,
    /// The quota.
    pub bound: f64,
    /// The window the rate was measured over.
    pub window_ms: i64,
}

impl Violation {
    /// `QuotaUtils.throttleTime`: the delay X that brings the observed rate O down to the
    /// target T over the window W, O * W / (W + X) = T, so X = (O - T) / T * W, rounded.
    pub fn throttle_time_ms(&self) -> i64 {
        ((self.value - self.bound) / self.bound * self.window_ms as f64).round() as i64
    }

    /// `QuotaUtils.boundedThrottleTime`: the same, capped (request and connection quotas cap
    /// it at one quota window).
    pub fn bounded_throttle_time_ms(&self, max_ms: i64) -> i64 {
        self.throttle_time_ms().min(max_ms)
    }
}

impl QuotaSensor {
    /// Records `value` and checks the bound (`Sensor.record(value, now, true)`).
    pub fn record(
        &mut self,
        config: SampleConfig,
        bound: Option<f64>,
        value: f64,
        now_ms: i64,
    ) -> Option<Violation> {
        self.rate.record(config, value, now_ms);
        let bound = bound?;
        let value = self.rate.measure(config, now_ms);
        (value > bound).then(|| Violation {
            value,
            bound,
            window_ms: self.rate.window_size_ms(config, now_ms),
        })
    }

    /// Records without checking the bound (also used with a negative value to "unrecord").
    pub fn record_unchecked(&mut self, config: SampleConfig, value: f64, now_ms: i64) {
        self.rate.record(config, value, now_ms);
    }

    pub fn measure(&mut self, config: SampleConfig, now_ms: i64) -> f64 {
        self.rate.measure(config, now_ms)
    }

    pub fn is_idle(&self, config: SampleConfig, now_ms: i64) -> bool {
        self.rate.is_idle(config, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: SampleConfig = SampleConfig::DEFAULT;

    #[test]
    fn a_new_rate_is_measured_over_at_least_ten_windows() {
        let mut r = Rate::default();
        r.record(C, 10_000.0, 0);
        // One event at t=0: 10 000 bytes over the minimum of 10 whole windows.
        assert_eq!(r.window_size_ms(C, 0), 10_000);
        assert_eq!(r.measure(C, 0), 1000.0);
        // 500 ms later the window has grown to 10.5 s.
        assert_eq!(r.window_size_ms(C, 500), 10_500);
    }

    #[test]
    fn old_samples_expire_after_the_whole_window() {
        let mut r = Rate::default();
        r.record(C, 5000.0, 0);
        assert!(r.measure(C, 10_999) > 0.0);
        assert_eq!(r.measure(C, 11_000), 0.0);
        assert!(r.is_idle(C, 11_000));
    }

    #[test]
    fn a_steady_rate_is_measured_exactly() {
        let mut r = Rate::default();
        // 100 bytes every 10 ms for 30 s: 10 000 B/s.
        let mut t = 0;
        while t < 30_000 {
            r.record(C, 100.0, t);
            t += 10;
        }
        let rate = r.measure(C, t);
        assert!((rate - 10_000.0).abs() < 150.0, "{rate}");
    }

    #[test]
    fn throttle_time_is_kafkas_formula() {
        // O = 1500, T = 1000, W = 10 s: X = 0.5 * 10 s = 5 s.
        let v = Violation {
            value: 1500.0,
            bound: 1000.0,
            window_ms: 10_000,
        };
        assert_eq!(v.throttle_time_ms(), 5000);
        assert_eq!(v.bounded_throttle_time_ms(1000), 1000);
        // Rounded to the nearest millisecond.
        let v = Violation {
            value: 1000.16,
            bound: 1000.0,
            window_ms: 10_000,
        };
        assert_eq!(v.throttle_time_ms(), 2);
    }

    #[test]
    fn a_sensor_reports_a_violation_only_above_the_bound() {
        let mut s = QuotaSensor::default();
        // 10 000 bytes at t=0 measure 1000 B/s: exactly the bound is allowed.
        assert_eq!(s.record(C, Some(1000.0), 10_000.0, 0), None);
        let v = s
            .record(C, Some(1000.0), 5_000.0, 0)
            .expect("over the bound");
        assert_eq!(v.value, 1500.0);
        assert_eq!(v.window_ms, 10_000);
        assert_eq!(v.throttle_time_ms(), 5000);
        // No bound: never throttled.
        assert_eq!(s.record(C, None, 1e9, 0), None);
    }

    #[test]
    fn a_client_that_waits_its_throttle_times_converges_to_the_quota() {
        // A producer sending 64 KiB requests as fast as it may (20 ms apart unless throttled)
        // against a 100 KB/s quota, for 60 s of simulated time.
        let quota = 100_000.0;
        let mut s = QuotaSensor::default();
        let (mut t, mut sent) = (0i64, 0.0);
        while t < 60_000 {
            sent += 65_536.0;
            let throttle = s
                .record(C, Some(quota), 65_536.0, t)
                .map_or(0, |v| v.throttle_time_ms());
            t += 20 + throttle;
        }
        let achieved = sent / (t as f64 / 1000.0);
        assert!(
            (achieved - quota).abs() / quota < 0.10,
            "achieved {achieved} B/s against {quota}"
        );
    }

    #[test]
    fn unrecording_restores_the_previous_sum() {
        let mut s = QuotaSensor::default();
        s.record_unchecked(C, 4000.0, 0);
        s.record_unchecked(C, 6000.0, 10);
        s.record_unchecked(C, -6000.0, 10);
        assert_eq!(s.measure(C, 10), 4000.0 / 10.01);
    }

    #[test]
    fn avg_is_the_mean_of_recent_values() {
        let mut a = Avg::default();
        assert_eq!(a.measure(C, 0), 0.0);
        a.record(C, 100.0, 0);
        a.record(C, 300.0, 1500);
        assert_eq!(a.measure(C, 2000), 200.0);
        assert_eq!(a.measure(C, 20_000), 0.0);
    }
}
