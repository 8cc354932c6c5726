//! The broker-wide budget for request bytes being read or handled (Kafka's MemoryPool,
//! `queued.max.request.bytes`).
//!
//! A connection reserves a frame's size from the pool after reading its 4-byte size prefix
//! and before reading the body, and keeps the [`Reservation`] until the request has been
//! handled (decoded requests, produce records above all, are zero-copy slices of the frame).
//! A connection whose frame does not fit stops reading (is muted) until enough memory has
//! been released; other connections keep being served.
//!
//! Invariants:
//! - The bytes reserved never exceed the capacity: a reservation is granted only when it
//!   fits in what is free ("first fit": a small request may pass a large one that is waiting,
//!   so a request that fits is never held up by one that does not).
//! - A reservation larger than the whole pool is clamped to the capacity: it waits until the
//!   pool is empty and then takes all of it, so it is served rather than waiting forever. The
//!   broker's configuration keeps `socket.request.max.bytes` at most the capacity, so this is
//!   a safeguard, not a path that is expected.
//! - First fit has no queue: a large request waits until enough memory is free at once, so a
//!   steady stream of requests that keep the pool nearly full can hold it back for as long as
//!   they last. Every reservation ends (requests are handled; a body that does not arrive in
//!   time closes its connection), which bounds the wait.
//! - An unbounded pool (`queued.max.request.bytes` = -1) grants every reservation at once and
//!   only counts what is reserved.
//!
//! Concurrency and cancellation: reservations are lock-free (one atomic); a waiter re-checks
//! whenever any reservation is released. Dropping a [`MemoryPool::reserve`] future while it
//! waits reserves nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// A shared byte budget. See the module docs.
pub struct MemoryPool {
    /// `None`: unbounded.
    capacity: Option<u64>,
    reserved: AtomicU64,
    released: Notify,
    /// Reservations that had to wait for memory.
    waits: AtomicU64,
}

/// Bytes held from a [`MemoryPool`]; given back when dropped.
#[must_use = "the memory is released as soon as the reservation is dropped"]
pub struct Reservation<'a> {
    pool: &'a MemoryPool,
    bytes: u64,
}

impl MemoryPool {
    /// A pool of `capacity` bytes; `None` is unbounded.
    pub fn new(capacity: Option<u64>) -> MemoryPool {
        MemoryPool {
            capacity,
            reserved: AtomicU64::new(0),
            released: Notify::new(),
            waits: AtomicU64::new(0),
        }
    }

    /// The configured capacity (`None`: unbounded).
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Bytes currently reserved.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// How many reservations have had to wait for memory so far.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` if they fit now.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation<'_>> {
        let bytes = self.capacity.map_or(bytes, |c| bytes.min(c));
        let fits = |reserved: u64| match self.capacity {
            None => reserved.checked_add(bytes),
            Some(c) => reserved.checked_add(bytes).filter(|&r| r <= c),
        };
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, fits)
            .ok()
            .map(|_| Reservation { pool: self, bytes })
    }

    /// Reserves `bytes`, waiting until they fit.
    pub async fn reserve(&self, bytes: u64) -> Reservation<'_> {
        if let Some(r) = self.try_reserve(bytes) {
            return r;
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        loop {
            // Register for the wake-up before checking, so a release in between is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(r) = self.try_reserve(bytes) {
                return r;
            }
            released.await;
        }
    }
}

impl Reservation<'_> {
    /// The bytes this reservation holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        self.pool.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
        // Every waiter re-checks: a release may make room for several small ones, or for a
        // large one further back.
        self.pool.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reservation_that_does_not_fit_waits_until_memory_is_released() {
        let pool = MemoryPool::new(Some(100));
        let a = pool.reserve(60).await;
        assert_eq!(pool.reserved(), 60);
        assert!(pool.try_reserve(50).is_none());
        let waiting = pool.reserve(50);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), waiting.as_mut())
                .await
                .is_err(),
            "50 bytes do not fit next to 60 of 100"
        );
        // A small one passes the waiting large one.
        let small = pool.try_reserve(40).expect("40 fits");
        drop(small);
        drop(a);
        let b = waiting.await;
        assert_eq!(b.bytes(), 50);
        assert_eq!(pool.reserved(), 50);
        assert_eq!(pool.waits(), 1);
        drop(b);
        assert_eq!(pool.reserved(), 0);
    }

    #[tokio::test]
    async fn a_reservation_larger_than_the_pool_takes_the_whole_pool_once_it_is_empty() {
        let pool = MemoryPool::new(Some(100));
        let a = pool.reserve(1).await;
        assert!(pool.try_reserve(1000).is_none());
        drop(a);
        let big = pool.reserve(1000).await;
        assert_eq!(big.bytes(), 100);
        assert!(pool.try_reserve(1).is_none());
    }

    #[tokio::test]
    async fn an_unbounded_pool_grants_everything_and_counts_it() {
        let pool = MemoryPool::new(None);
        let a = pool.reserve(1 << 40).await;
        let b = pool.reserve(1 << 40).await;
        assert_eq!(pool.reserved(), 2 << 40);
        drop((a, b));
        assert_eq!(pool.reserved(), 0);
        assert_eq!(pool.waits(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_wait_reserves_nothing() {
        let pool = MemoryPool::new(Some(10));
        let a = pool.reserve(10).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(10), pool.reserve(5))
                .await
                .is_err()
        );
        drop(a);
        assert_eq!(pool.reserved(), 0);
    }
}
