//! The blocking pool: where file I/O, fsync and directory changes run, off the async workers.

/// Runs `f` on the blocking pool. A panic there is a bug; it is reported as a storage error
/// rather than taking the calling task down.
///
/// The closure's run time counts towards the request's thread time (request quotas, see
/// [`crate::quota::request`]).
pub async fn run<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    tokio::task::spawn_blocking(crate::quota::request::account_blocking(f)).await
}
