//! The state machine: applies committed entries to [`MetadataState`], publishes each applied
//! state to readers, and builds/installs snapshots kept in `snapshot.bin`.

use std::fs;
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::file::{encode_frame, io_error, read_frame, read_if_exists, write_atomically, Frame};
use super::{blocking, storage_error, StoreError};
use crate::command::{CommandResult, Response};
use crate::state::MetadataState;
use crate::voters::QuorumNode;
use crate::TypeConfig;

const SNAPSHOT_FILE: &str = "snapshot.bin";
/// Bumped when the serialized state changes incompatibly.
const SNAPSHOT_FORMAT: u32 = 1;

/// An applied state as readers see it: immutable and cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct MetadataImage {
    /// The index of the last applied log entry (`None` before the first).
    pub applied_index: Option<u64>,
    pub state: Arc<MetadataState>,
}

/// The serialized form of the state inside a snapshot.
#[derive(Deserialize)]
struct SnapshotBody {
    format: u32,
    state: MetadataState,
}

/// [`SnapshotBody`] for writing, borrowing the state.
#[derive(Serialize)]
struct SnapshotBodyRef<'a> {
    format: u32,
    state: &'a MetadataState,
}

/// A snapshot held in memory (and in `snapshot.bin`).
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, QuorumNode>,
    data: Arc<Vec<u8>>,
}

struct Applied {
    last_applied: Option<LogId<u64>>,
    last_membership: StoredMembership<u64, QuorumNode>,
    state: Arc<MetadataState>,
}

struct Shared {
    dir: PathBuf,
    applied: Mutex<Applied>,
    snapshot: Mutex<Option<StoredSnapshot>>,
    image: watch::Sender<MetadataImage>,
}

/// The Raft state machine store. Cheap to clone; clones share state (the snapshot builder is
/// a clone).
#[derive(Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Apply validates before it mutates and never panics on input, so a poisoned lock holds a
    // consistent value.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl StateMachineStore {
    /// Opens the store in `dir`, starting from the snapshot there if there is one.
    pub async fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let dir = dir.into();
        let load_dir = dir.clone();
        let snapshot = blocking(move || {
            fs::create_dir_all(&load_dir).map_err(io_error("create directory", &load_dir))?;
            load_snapshot(&load_dir)
        })
        .await?;
        let (applied, stored) = match snapshot {
            Some((stored, state)) => (
                Applied {
                    last_applied: stored.meta.last_log_id,
                    last_membership: stored.meta.last_membership.clone(),
                    state: Arc::new(state),
                },
                Some(stored),
            ),
            None => (
                Applied {
                    last_applied: None,
                    last_membership: StoredMembership::default(),
                    state: Arc::new(MetadataState::new()),
                },
                None,
            ),
        };
        let image = MetadataImage {
            applied_index: applied.last_applied.map(|id| id.index),
            state: applied.state.clone(),
        };
        Ok(StateMachineStore {
            shared: Arc::new(Shared {
                dir,
                applied: Mutex::new(applied),
                snapshot: Mutex::new(stored),
                image: watch::Sender::new(image),
            }),
        })
    }

    /// A receiver of every newly applied state.
    pub fn subscribe(&self) -> watch::Receiver<MetadataImage> {
        self.shared.image.subscribe()
    }

    /// The latest applied state.
    pub fn image(&self) -> MetadataImage {
        self.shared.image.borrow().clone()
    }

    fn publish(&self, applied: &Applied) {
        self.shared.image.send_replace(MetadataImage {
            applied_index: applied.last_applied.map(|id| id.index),
            state: applied.state.clone(),
        });
    }

    /// Persists `snapshot` unless a newer one is already in place, then keeps it as current.
    async fn store_snapshot(&self, snapshot: StoredSnapshot) -> Result<(), StoreError> {
        let shared = self.shared.clone();
        blocking(move || {
            let mut current = lock(&shared.snapshot);
            if current
                .as_ref()
                .is_some_and(|c| c.meta.last_log_id > snapshot.meta.last_log_id)
            {
                return Ok(());
            }
            let bytes = encode_snapshot_file(&snapshot)?;
            write_atomically(&shared.dir, SNAPSHOT_FILE, &bytes)?;
            *current = Some(snapshot);
            Ok(())
        })
        .await
    }
}

fn encode_snapshot_file(snapshot: &StoredSnapshot) -> Result<Vec<u8>, StoreError> {
    let meta = serde_json::to_vec(&snapshot.meta).map_err(|source| StoreError::Encode {
        what: "snapshot meta",
        source,
    })?;
    let mut bytes = Vec::with_capacity(meta.len() + snapshot.data.len() + 16);
    encode_frame(&meta, &mut bytes);
    encode_frame(&snapshot.data, &mut bytes);
    Ok(bytes)
}

fn load_snapshot(
    dir: &std::path::Path,
) -> Result<Option<(StoredSnapshot, MetadataState)>, StoreError> {
    let path = dir.join(SNAPSHOT_FILE);
    let Some(bytes) = read_if_exists(&path)? else {
        return Ok(None);
    };
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.clone(),
        reason,
    };
    let Frame::Complete { payload: meta, end } = read_frame(&bytes, 0) else {
        return Err(corrupt("unreadable snapshot meta".into()));
    };
    let Frame::Complete { payload: data, .. } = read_frame(&bytes, end) else {
        return Err(corrupt("unreadable snapshot data".into()));
    };
    let meta: SnapshotMeta<u64, QuorumNode> =
        serde_json::from_slice(meta).map_err(|e| corrupt(format!("snapshot meta: {e}")))?;
    let state = decode_state(data).map_err(corrupt)?;
    Ok(Some((
        StoredSnapshot {
            meta,
            data: Arc::new(data.to_vec()),
        },
        state,
    )))
}

fn decode_state(data: &[u8]) -> Result<MetadataState, String> {
    let body: SnapshotBody =
        serde_json::from_slice(data).map_err(|e| format!("snapshot state: {e}"))?;
    if body.format != SNAPSHOT_FORMAT {
        return Err(format!(
            "snapshot format {} is not supported (expected {SNAPSHOT_FORMAT})",
            body.format
        ));
    }
    Ok(body.state)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let (last_applied, last_membership, state) = {
            let applied = lock(&self.shared.applied);
            (
                applied.last_applied,
                applied.last_membership.clone(),
                applied.state.clone(),
            )
        };
        // The state is an immutable Arc: serialize it without holding any lock.
        let body = SnapshotBodyRef {
            format: SNAPSHOT_FORMAT,
            state: &state,
        };
        let data = serde_json::to_vec(&body).map_err(|source| {
            storage_error(
                |e| StorageIOError::write_snapshot(None, e),
                StoreError::Encode {
                    what: "the snapshot state",
                    source,
                },
            )
        })?;
        let snapshot_id = match last_applied {
            Some(id) => format!(
                "{}-{}-{}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => "empty".to_owned(),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: Arc::new(data),
        };
        let data = stored.data.as_ref().clone();
        self.store_snapshot(stored)
            .await
            .map_err(|e| storage_error(|e| StorageIOError::write_snapshot(None, e), e))?;
        tracing::debug!(
            snapshot = %meta.snapshot_id,
            bytes = data.len(),
            "built a metadata snapshot"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, QuorumNode>), StorageError<u64>> {
        let applied = lock(&self.shared.applied);
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut results = Vec::new();
        let mut applied = lock(&self.shared.applied);
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            let result = match entry.payload {
                EntryPayload::Blank => Ok(Response::Noop),
                EntryPayload::Normal(command) => {
                    let result =
                        Arc::make_mut(&mut applied.state).apply(entry.log_id.index, &command);
                    if let Err(error) = &result {
                        tracing::debug!(
                            index = entry.log_id.index,
                            command = command.name(),
                            %error,
                            "metadata command rejected"
                        );
                    }
                    result
                }
                EntryPayload::Membership(membership) => {
                    applied.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    Ok(Response::Noop)
                }
            };
            results.push(result);
        }
        self.publish(&applied);
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, QuorumNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let state = decode_state(&data).map_err(|reason| {
            let error = StoreError::Corrupt {
                path: self.shared.dir.join("<received snapshot>"),
                reason,
            };
            storage_error(
                |e| StorageIOError::read_snapshot(Some(meta.signature()), e),
                error,
            )
        })?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: Arc::new(data),
        };
        self.store_snapshot(stored).await.map_err(|e| {
            storage_error(
                |e| StorageIOError::write_snapshot(Some(meta.signature()), e),
                e,
            )
        })?;
        let mut applied = lock(&self.shared.applied);
        applied.last_applied = meta.last_log_id;
        applied.last_membership = meta.last_membership.clone();
        applied.state = Arc::new(state);
        self.publish(&applied);
        tracing::info!(snapshot = %meta.snapshot_id, "installed a metadata snapshot");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let current = lock(&self.shared.snapshot).clone();
        Ok(current.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data.as_ref().clone())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::testing::log_id;
    use openraft::Membership;

    use super::*;
    use crate::command::{Command, RecordKind};

    fn put(index: u64, key: &str) -> Entry<TypeConfig> {
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(Command::PutRecord {
                kind: RecordKind::ClientQuota,
                key: key.into(),
                value: vec![1],
            }),
        }
    }

    #[tokio::test]
    async fn applied_states_are_published_and_snapshots_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateMachineStore::open(dir.path()).await.unwrap();
        let mut image = store.subscribe();
        let membership = Entry {
            log_id: log_id(1, 1, 1),
            payload: EntryPayload::Membership(Membership::new(vec![[1u64].into()], None)),
        };
        let rejected = Entry {
            log_id: log_id(1, 1, 4),
            payload: EntryPayload::Normal(Command::PutRecord {
                kind: RecordKind::Acl,
                key: String::new(),
                value: vec![],
            }),
        };
        let results = store
            .apply(vec![membership, put(2, "a"), put(3, "b"), rejected])
            .await
            .unwrap();
        assert_eq!(results.len(), 4);
        assert!(results[3].is_err());
        assert!(image.has_changed().unwrap());
        let seen = image.borrow_and_update().clone();
        assert_eq!(seen.applied_index, Some(4));
        assert!(seen.state.record(RecordKind::ClientQuota, "b").is_some());

        let snapshot = store
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 1, 4)));
        store.apply(vec![put(5, "c")]).await.unwrap();
        drop(store);

        // Reopening starts from the snapshot; entry 5 is for openraft to re-apply.
        let mut store = StateMachineStore::open(dir.path()).await.unwrap();
        let (applied, membership) = store.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(1, 1, 4)));
        assert_eq!(membership.log_id(), &Some(log_id(1, 1, 1)));
        let image = store.image();
        assert!(image.state.record(RecordKind::ClientQuota, "b").is_some());
        assert!(image.state.record(RecordKind::ClientQuota, "c").is_none());
        let current = store.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, snapshot.meta);
    }

    #[tokio::test]
    async fn the_cluster_id_travels_in_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateMachineStore::open(dir.path()).await.unwrap();
        let set = Entry {
            log_id: log_id(1, 1, 1),
            payload: EntryPayload::Normal(Command::SetClusterId {
                cluster_id: "snapshot-cluster".into(),
            }),
        };
        store.apply(vec![set, put(2, "a")]).await.unwrap();
        let snapshot = store
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        drop(store);

        // Reopened from snapshot.bin.
        let store = StateMachineStore::open(dir.path()).await.unwrap();
        assert_eq!(store.image().state.cluster_id(), Some("snapshot-cluster"));
        // Installed on another node (a follower or learner catching up by snapshot).
        let other = tempfile::tempdir().unwrap();
        let mut follower = StateMachineStore::open(other.path()).await.unwrap();
        follower
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .unwrap();
        assert_eq!(
            follower.image().state.cluster_id(),
            Some("snapshot-cluster")
        );
    }

    #[tokio::test]
    async fn a_snapshot_with_garbage_data_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateMachineStore::open(dir.path()).await.unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(1, 1, 9)),
            last_membership: StoredMembership::default(),
            snapshot_id: "x".into(),
        };
        let err = store
            .install_snapshot(&meta, Box::new(Cursor::new(b"not json".to_vec())))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("snapshot state"), "{err}");
        assert_eq!(store.image().applied_index, None);
    }
}
