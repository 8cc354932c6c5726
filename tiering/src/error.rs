//! The one error type of the tiering orchestration ([`crate::upload_queue`] and the broker's
//! tiering task): what a caller can act on, not where it came from.
//!
//! A [`TieringError::Fenced`] writer stops (a newer leader owns the manifest); a
//! [`TieringError::Retriable`] or [`TieringError::LocalLog`] failure is retried with backoff
//! ([`crate::backoff::retry`]); [`TieringError::Cancelled`] is shutdown, not a failure.

use std::io;

use crate::manifest::CommitError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum TieringError {
    /// A newer leader epoch has claimed the manifest: this writer has been deposed and must
    /// not retry (it learns so from the metadata shortly).
    #[error("fenced: the manifest was written by leader epoch {stored}, ours is {ours}")]
    Fenced { stored: i32, ours: i32 },
    /// An object store request failed or a compare-and-swap lost a race: retry.
    #[error(transparent)]
    Retriable(StoreError),
    /// The broker's local log could not be read or changed (an I/O error, or its blocking
    /// task failed): retry.
    #[error("local log: {0}")]
    LocalLog(io::Error),
    /// Shutdown asked the operation to stop.
    #[error("cancelled")]
    Cancelled,
}

impl TieringError {
    /// Whether the same operation may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        matches!(self, TieringError::Retriable(_) | TieringError::LocalLog(_))
    }

    pub fn is_fenced(&self) -> bool {
        matches!(self, TieringError::Fenced { .. })
    }
}

impl From<StoreError> for TieringError {
    fn from(e: StoreError) -> Self {
        TieringError::Retriable(e)
    }
}

impl From<CommitError> for TieringError {
    fn from(e: CommitError) -> Self {
        match e {
            CommitError::Fenced { stored, ours } => TieringError::Fenced { stored, ours },
            CommitError::Conflict => TieringError::Retriable(StoreError::Conflict(
                "manifest (changed since it was read)".to_string(),
            )),
            CommitError::Store(e) => TieringError::Retriable(e),
        }
    }
}

impl From<io::Error> for TieringError {
    fn from(e: io::Error) -> Self {
        TieringError::LocalLog(e)
    }
}

impl From<tokio::task::JoinError> for TieringError {
    fn from(e: tokio::task::JoinError) -> Self {
        TieringError::LocalLog(io::Error::other(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_and_cancelled_are_not_retriable() {
        let fenced: TieringError = CommitError::Fenced { stored: 3, ours: 2 }.into();
        assert!(fenced.is_fenced() && !fenced.is_retriable());
        assert!(!TieringError::Cancelled.is_retriable());
        let lost: TieringError = CommitError::Conflict.into();
        assert!(lost.is_retriable());
        let store: TieringError = StoreError::Injected("put".into()).into();
        assert!(store.is_retriable());
        let local: TieringError = io::Error::other("disk").into();
        assert!(local.is_retriable());
    }
}
