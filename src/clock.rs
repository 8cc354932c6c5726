//! Wall-clock time as Kafka's records and checkpoints carry it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Where a component reads the time: the system clock, or one a test moves by hand so that a
/// timeout or an expiry is reached without sleeping.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    #[default]
    System,
    Manual(std::sync::Arc<std::sync::atomic::AtomicI64>),
}

impl Clock {
    /// A manual clock starting at `start_ms`.
    pub fn manual(start_ms: i64) -> Clock {
        Clock::Manual(std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
            start_ms,
        )))
    }

    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => now_ms(),
            Clock::Manual(t) => t.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Moves a manual clock forward (no effect on the system clock).
    pub fn advance_ms(&self, ms: i64) {
        if let Clock::Manual(t) = self {
            t.fetch_add(ms, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = Clock::manual(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance_ms(250);
        assert_eq!(c.now_ms(), 1_250);
        assert!(Clock::System.now_ms() > 1_600_000_000_000);
    }
}
