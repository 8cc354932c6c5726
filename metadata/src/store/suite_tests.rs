//! openraft's storage conformance suite, run against the on-disk stores.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

use super::{LogStore, LogStoreOptions, StateMachineStore};
use crate::TypeConfig;

/// Builds both stores in a fresh temporary directory, removed when the guard drops.
struct TempDirStores {
    /// Segment size; a small one makes the suite's purges and truncations cross files.
    options: LogStoreOptions,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for TempDirStores {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let io = |e: std::io::Error| {
            StorageError::from_io_error(
                openraft::ErrorSubject::Store,
                openraft::ErrorVerb::Write,
                e,
            )
        };
        let dir = tempfile::tempdir().map_err(io)?;
        let to_storage =
            |e: super::StoreError| super::storage_error(openraft::StorageIOError::write, e);
        let log = LogStore::open(dir.path().join("log"), self.options.clone())
            .await
            .map_err(to_storage)?;
        let state_machine = StateMachineStore::open(dir.path().join("state"))
            .await
            .map_err(to_storage)?;
        Ok((dir, log, state_machine))
    }
}

#[test]
fn log_and_state_machine_pass_the_openraft_storage_suite() {
    let result = Suite::test_all(TempDirStores {
        options: LogStoreOptions { segment_bytes: 256 },
    });
    if let Err(error) = result {
        panic!("storage suite failed: {error}");
    }
}

#[test]
fn default_sized_segments_pass_the_openraft_storage_suite() {
    let result = Suite::test_all(TempDirStores {
        options: LogStoreOptions::default(),
    });
    if let Err(error) = result {
        panic!("storage suite failed: {error}");
    }
}
