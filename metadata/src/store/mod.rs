//! Durable storage for the Raft node: the metadata log ([`LogStore`], openraft's
//! `RaftLogStorage`) and the state machine with its snapshots ([`StateMachineStore`],
//! openraft's `RaftStateMachine`). Both pass `openraft::testing::Suite`.
//!
//! On disk, under the node's directory:
//! - `log/<first_index:020>.log`: segment files of checksummed frames, one serialized entry
//!   each, appended and fsynced before an append is acknowledged. A new segment starts when
//!   the active one passes `segment_bytes`.
//! - `log/raft-meta.json`: the vote, the committed log id and the last purged log id,
//!   replaced atomically (write, fsync, rename, fsync directory) on every change.
//! - `state/snapshot.bin`: the newest snapshot (metadata and serialized state), replaced
//!   atomically.
//!
//! Crash consistency: a torn frame at the end of the last segment (a crash mid-append, never
//! acknowledged) is cut off on open; a bad frame anywhere else is reported as corruption.
//! Purge records the purged id first, then deletes whole segments, so a crash in between
//! leaves segments that open() ignores and deletes. Truncate deletes the newest segments
//! first and cuts the one holding the first removed entry, so every intermediate state is a
//! prefix of the log. The state machine itself is not persisted: on start it is the newest
//! snapshot, and openraft re-applies the log from there up to the saved committed id.
//!
//! Concurrency: openraft calls each store from one task at a time (`&mut self`). Entries are
//! also kept in memory behind a short-lived `RwLock` so the log readers of replication tasks
//! never wait on disk I/O; file work runs on the blocking pool with the disk state behind a
//! `Mutex` that is only taken there.

mod file;
mod log;
mod state_machine;

#[cfg(test)]
mod suite_tests;

use std::path::PathBuf;

use openraft::{AnyError, StorageError, StorageIOError};

pub use self::log::{LogReader, LogStore, LogStoreOptions};
pub use self::state_machine::{MetadataImage, StateMachineStore};

/// Why opening or writing the on-disk stores failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the log does not accept entry {index}: {reason}")]
    OutOfOrder { index: u64, reason: String },
    #[error("a blocking storage task failed: {0}")]
    Task(String),
}

/// Runs blocking file work on tokio's blocking pool.
async fn blocking<T, F>(work: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

/// Wraps a [`StoreError`] the way openraft expects for the operation that failed.
fn storage_error(
    make: impl FnOnce(AnyError) -> StorageIOError<u64>,
    error: StoreError,
) -> StorageError<u64> {
    make(AnyError::new(&error)).into()
}
