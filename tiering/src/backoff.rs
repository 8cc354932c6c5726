//! The one retry-with-backoff helper of the tiering crate.
//!
//! [`retry`] runs an operation until it succeeds, fails with an error that is not retriable,
//! runs out of attempts, or the [`CancellationToken`] fires (then it returns
//! [`TieringError::Cancelled`] at once, also in the middle of a backoff sleep). Delays grow
//! exponentially from `initial` to `max`. Failures log quietly (DEBUG) for the first
//! `warn_after` attempts and at WARN after that; the caller logs the final error once.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::TieringError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// Attempts in all (at least one).
    pub max_attempts: u32,
    /// Attempts that fail quietly before retries log at WARN.
    pub warn_after: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            max_attempts: 4,
            warn_after: 2,
        }
    }
}

impl Backoff {
    /// The pause after failed attempt `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(20);
        self.initial.saturating_mul(1u32 << exp).min(self.max)
    }
}

/// Runs `op` with retries per `policy` while its error [`TieringError::is_retriable`] (see
/// the module doc). `what` names the operation in the logs.
pub async fn retry<T, F, Fut>(
    cancel: &CancellationToken,
    policy: Backoff,
    what: &str,
    mut op: F,
) -> Result<T, TieringError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, TieringError>>,
{
    let mut attempt = 0u32;
    loop {
        if cancel.is_cancelled() {
            return Err(TieringError::Cancelled);
        }
        attempt += 1;
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TieringError::Cancelled),
            r = op() => r,
        };
        let e = match result {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !e.is_retriable() || attempt >= policy.max_attempts.max(1) {
            return Err(e);
        }
        let pause = policy.delay(attempt);
        if attempt > policy.warn_after {
            tracing::warn!(operation = what, attempt, error = %e, retry_in = ?pause, "remote storage operation failed; retrying");
        } else {
            tracing::debug!(operation = what, attempt, error = %e, retry_in = ?pause, "remote storage operation failed; retrying");
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(TieringError::Cancelled),
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::time::Instant;

    use super::*;
    use crate::store::StoreError;

    fn policy() -> Backoff {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            max_attempts: 5,
            warn_after: 2,
        }
    }

    #[test]
    fn delays_grow_exponentially_up_to_the_cap() {
        let p = policy();
        let d: Vec<u64> = (1..=5).map(|a| p.delay(a).as_millis() as u64).collect();
        assert_eq!(d, [100, 200, 400, 400, 400]);
        assert_eq!(p.delay(u32::MAX), Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn retriable_failures_are_retried_after_the_backoff() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let out = retry(&CancellationToken::new(), policy(), "test", || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(TieringError::Retriable(StoreError::Injected("put".into())))
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(out.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        // 100 + 200 + 400 ms of backoff, on the paused clock.
        assert_eq!(started.elapsed(), Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_writer_is_not_retried() {
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(&CancellationToken::new(), policy(), "test", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(TieringError::Fenced { stored: 2, ours: 1 })
        })
        .await;
        assert!(out.unwrap_err().is_fenced());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_are_bounded() {
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = retry(&CancellationToken::new(), policy(), "test", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(TieringError::LocalLog(std::io::Error::other("disk")))
        })
        .await;
        assert!(matches!(out, Err(TieringError::LocalLog(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_interrupts_the_backoff() {
        let cancel = CancellationToken::new();
        let calls = AtomicU32::new(0);
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            c.cancel();
        });
        let started = Instant::now();
        let out: Result<(), _> = retry(&cancel, policy(), "test", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(TieringError::Retriable(StoreError::Injected("put".into())))
        })
        .await;
        assert!(matches!(out, Err(TieringError::Cancelled)));
        // First attempt, 100 ms pause, second attempt, cancelled 50 ms into the 200 ms pause.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(150));
    }
}
