//! The I/O throttle shared by all cleaner tasks (`log.cleaner.io.max.bytes.per.second`),
//! after Kafka's `Throttler`: bytes read and written are counted; every `check_interval` the
//! observed rate is compared with the limit and the caller sleeps long enough to bring it back.
//! The sleep happens under the throttle's lock, so all cleaner tasks share one budget.
//!
//! Time comes from a [`Clock`] so tests can run it on a manual clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn sleep(&self, duration: Duration);
}

/// The real clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

pub struct Throttler {
    /// The rate, as `f64` bits: changed at run time ([`Throttler::set_rate`]).
    bytes_per_second: AtomicU64,
    check_interval: Duration,
    clock: Arc<dyn Clock>,
    window: Mutex<Window>,
}

struct Window {
    start: Instant,
    bytes: f64,
}

impl Throttler {
    /// Kafka checks every 300 ms.
    pub const CHECK_INTERVAL: Duration = Duration::from_millis(300);

    pub fn new(bytes_per_second: f64) -> Self {
        Self::with_clock(bytes_per_second, Arc::new(SystemClock))
    }

    pub fn with_clock(bytes_per_second: f64, clock: Arc<dyn Clock>) -> Self {
        let start = clock.now();
        Throttler {
            bytes_per_second: AtomicU64::new(bytes_per_second.to_bits()),
            check_interval: Self::CHECK_INTERVAL,
            clock,
            window: Mutex::new(Window { start, bytes: 0.0 }),
        }
    }

    /// A throttle that never sleeps.
    pub fn unlimited() -> Self {
        Self::new(f64::MAX)
    }

    /// The limit in bytes per second.
    pub fn rate(&self) -> f64 {
        f64::from_bits(self.bytes_per_second.load(Ordering::Relaxed))
    }

    /// A new limit, from the next check on (Kafka's `updateDesiredRatePerSec`).
    pub fn set_rate(&self, bytes_per_second: f64) {
        self.bytes_per_second
            .store(bytes_per_second.to_bits(), Ordering::Relaxed);
    }

    /// Accounts for `bytes` of I/O and sleeps if the shared rate is above the limit.
    pub fn maybe_throttle(&self, bytes: u64) {
        let limit = self.rate();
        if limit.is_nan() || limit <= 0.0 || limit == f64::MAX {
            return;
        }
        // A poisoned lock only means another task panicked while holding it; the window is
        // still usable.
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        window.bytes += bytes as f64;
        let elapsed = self.clock.now().saturating_duration_since(window.start);
        if elapsed < self.check_interval {
            return;
        }
        let rate = window.bytes / elapsed.as_secs_f64();
        if rate > limit {
            let needed = Duration::from_secs_f64(window.bytes / limit);
            let sleep = needed.saturating_sub(elapsed);
            if !sleep.is_zero() {
                tracing::trace!(?sleep, rate, "cleaner I/O throttled");
                self.clock.sleep(sleep);
            }
        }
        window.start = self.clock.now();
        window.bytes = 0.0;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A clock that only moves when told to, or when something sleeps on it.
    pub struct ManualClock {
        now: Mutex<Instant>,
        pub slept: Mutex<Duration>,
    }

    impl ManualClock {
        pub fn new() -> Self {
            ManualClock {
                now: Mutex::new(Instant::now()),
                slept: Mutex::new(Duration::ZERO),
            }
        }

        pub fn advance(&self, by: Duration) {
            *self.now.lock().unwrap() += by;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            *self.now.lock().unwrap()
        }

        fn sleep(&self, duration: Duration) {
            *self.slept.lock().unwrap() += duration;
            self.advance(duration);
        }
    }

    #[test]
    fn sleeps_just_enough_to_hold_the_rate() {
        let clock = Arc::new(ManualClock::new());
        let throttler = Throttler::with_clock(1000.0, clock.clone());
        // 600 bytes in 300 ms is 2000 B/s: it must sleep 300 ms to get back to 1000 B/s.
        throttler.maybe_throttle(300);
        clock.advance(Duration::from_millis(300));
        throttler.maybe_throttle(300);
        assert_eq!(*clock.slept.lock().unwrap(), Duration::from_millis(300));

        // Under the limit: no sleep.
        throttler.maybe_throttle(100);
        clock.advance(Duration::from_millis(400));
        throttler.maybe_throttle(100);
        assert_eq!(*clock.slept.lock().unwrap(), Duration::from_millis(300));
    }

    #[test]
    fn a_new_rate_holds_from_the_next_check() {
        let clock = Arc::new(ManualClock::new());
        let throttler = Throttler::with_clock(1000.0, clock.clone());
        throttler.set_rate(2000.0);
        // 600 bytes in 300 ms is 2000 B/s: exactly the new limit, no sleep.
        throttler.maybe_throttle(300);
        clock.advance(Duration::from_millis(300));
        throttler.maybe_throttle(300);
        assert_eq!(*clock.slept.lock().unwrap(), Duration::ZERO);
        // Down to 500 B/s: the same bytes now take 1.2 s.
        throttler.set_rate(500.0);
        throttler.maybe_throttle(300);
        clock.advance(Duration::from_millis(300));
        throttler.maybe_throttle(300);
        assert_eq!(*clock.slept.lock().unwrap(), Duration::from_millis(900));
        assert_eq!(throttler.rate(), 500.0);
    }

    #[test]
    fn unlimited_never_sleeps() {
        // `unlimited()` on a manual clock that passes a check interval between calls, so
        // every call reaches the rate check a limited throttle sleeps at.
        let clock = Arc::new(ManualClock::new());
        let throttler = Throttler {
            clock: clock.clone(),
            ..Throttler::unlimited()
        };
        for _ in 0..1000 {
            throttler.maybe_throttle(u64::MAX / 2);
            clock.advance(Throttler::CHECK_INTERVAL);
        }
        assert_eq!(*clock.slept.lock().unwrap(), Duration::ZERO);
    }
}
