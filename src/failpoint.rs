//! Crash points: named places between two durable steps where a test can make the broker
//! die as a power cut would, to prove that recovery from exactly that state is correct.
//!
//! A crash point is one call, `failpoint::hit("tiering.manifest_committed")`, placed after a
//! step whose effect is durable (a manifest commit, an fsynced rename) and before the next.
//! It is compiled in always and costs one check of a `OnceLock` when not armed. It is armed by
//! the `STRATA_FAILPOINT` environment variable, read once per process:
//!
//! ```text
//! STRATA_FAILPOINT=<name>[:<n>][,<name>[:<n>]...]
//! ```
//!
//! The `n`-th time (1 when omitted) the process passes an armed point it writes one line to
//! stderr and calls [`std::process::abort`]: no destructor, flush, checkpoint or
//! clean-shutdown marker runs, exactly as under `kill -9`. Tests spawn the real `strata`
//! binary with the variable set, wait for it to die, start it again without it, and check
//! what a client observes (`tests/it/crash.rs`).
//!
//! The points (add a line here and a crash test with every new one):
//! - [`TIERING_UPLOADED`]: a segment bundle is in the bucket, the manifest does not name it
//!   yet (an orphan for the scrubber; the segment is uploaded again).
//! - [`TIERING_MANIFEST_COMMITTED`]: the manifest covering a segment is committed, local
//!   retention has not deleted the local copy yet.
//! - [`TIERING_REHYDRATE_DOWNLOADED`]: a remote segment is downloaded to temporary files, not
//!   in the local log; [`TIERING_REHYDRATED`]: it is renamed into place in front of the log
//!   (`tests/it/rehydration.rs`).
//! - [`CHECKPOINT_LOG_START`]: the recovery-point checkpoint is written, the log-start
//!   checkpoint is about to be (so on the first pass it is missing after the crash).
//! - [`SHARE_ACKNOWLEDGED_PERSISTED`]: a share acknowledgement's snapshot is in
//!   `__share_group_state`, the member has not been answered (`tests/it/share_groups.rs`).
//! - [`LOG_DIR_MOVE_COPIED`], [`LOG_DIR_MOVE_OLD_RENAMED`], [`LOG_DIR_MOVE_LIVE`]: the three
//!   durable steps of a replica moving to another log dir (`crate::broker::log_dir_move`;
//!   `tests/interop/test_log_dirs.py`).
//! - [`EXPORT_CHECKPOINTED`], [`ICEBERG_MANIFESTS_WRITTEN`], [`ICEBERG_METADATA_COMMITTED`]:
//!   `strata export --iceberg` between its durable steps (files landed and checkpointed, the
//!   table not committed; manifests written, no metadata naming them; the new metadata
//!   version created, the version hint not rewritten) (`tests/interop/test_iceberg_export.py`).
//!
//! Only the root crate has crash points: `strata-tiering` and `strata-compaction` do not
//! depend on it, so their steps get a point on the broker side, right after the call.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The environment variable that arms crash points.
pub const ENV: &str = "STRATA_FAILPOINT";

/// A segment is uploaded; its manifest commit has not happened yet.
pub const TIERING_UPLOADED: &str = "tiering.uploaded";
/// A manifest covering a segment is committed; the local segment is not deleted yet.
pub const TIERING_MANIFEST_COMMITTED: &str = "tiering.manifest_committed";
/// A remote segment is downloaded for rehydration; it is not in the local log yet.
pub const TIERING_REHYDRATE_DOWNLOADED: &str = "tiering.rehydrate_downloaded";
/// A rehydrated segment is in place in front of the local log.
pub const TIERING_REHYDRATED: &str = "tiering.rehydrated";
/// The log-start checkpoint is about to be written.
pub const CHECKPOINT_LOG_START: &str = "checkpoint.log_start";
/// A share acknowledgement is persisted; the share consumer has not been answered.
pub const SHARE_ACKNOWLEDGED_PERSISTED: &str = "share.acknowledged.persisted";
/// A replica's copy in another log dir is complete and fsynced; the old dir is still live.
pub const LOG_DIR_MOVE_COPIED: &str = "log_dir_move.copied";
/// The old dir is renamed `-moved`; the copy is not renamed live yet.
pub const LOG_DIR_MOVE_OLD_RENAMED: &str = "log_dir_move.old_renamed";
/// The copy is live; the checkpoints are not rewritten and the old dir not deleted yet.
pub const LOG_DIR_MOVE_LIVE: &str = "log_dir_move.live";
/// `strata export --iceberg`: every partition's files landed and checkpointed; the table
/// commit has not begun.
pub const EXPORT_CHECKPOINTED: &str = "export.checkpointed";
/// The commit's manifest and manifest list are written; no table metadata names them.
pub const ICEBERG_MANIFESTS_WRITTEN: &str = "iceberg.manifests_written";
/// The new table metadata version exists; `version-hint.text` names the previous one.
pub const ICEBERG_METADATA_COMMITTED: &str = "iceberg.metadata_committed";

struct Armed {
    /// Point name -> the hit that aborts (1-based).
    at: HashMap<String, u64>,
    hits: Mutex<HashMap<String, u64>>,
}

fn armed() -> &'static Option<Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var(ENV).ok()?;
        let at = parse(&spec);
        (!at.is_empty()).then(|| Armed {
            at,
            hits: Mutex::new(HashMap::new()),
        })
    })
}

/// `name[:n]` entries separated by commas; an unparsable count means 1.
fn parse(spec: &str) -> HashMap<String, u64> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once(':') {
            Some((name, n)) => (
                name.trim().to_string(),
                n.trim().parse().unwrap_or(1).max(1),
            ),
            None => (s.to_string(), 1),
        })
        .collect()
}

/// Passes the crash point `name`: aborts the process when `STRATA_FAILPOINT` arms it and this
/// is the hit it names; otherwise does nothing.
pub fn hit(name: &str) {
    let Some(armed) = armed() else {
        return;
    };
    let Some(&at) = armed.at.get(name) else {
        return;
    };
    let n = {
        let mut hits = armed.hits.lock().unwrap_or_else(|e| e.into_inner());
        let n = hits.entry(name.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    if n == at {
        eprintln!("{ENV}: crash point {name} (hit {n}): aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_names_points_and_the_hit_that_aborts() {
        let at = parse(" tiering.uploaded:3, checkpoint.log_start ,x:0,y:z,");
        assert_eq!(at.get("tiering.uploaded"), Some(&3));
        assert_eq!(at.get("checkpoint.log_start"), Some(&1));
        assert_eq!(at.get("x"), Some(&1));
        assert_eq!(at.get("y"), Some(&1));
        assert_eq!(at.len(), 4);
    }

    #[test]
    fn an_unarmed_point_does_nothing() {
        // The test process does not set STRATA_FAILPOINT for this name.
        hit("no.such.point");
    }
}
