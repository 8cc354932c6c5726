//! What coordinator and handler unit tests build on: an in-memory `__consumer_offsets` and a
//! group config without delays.

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use super::{GroupConfig, LogEntry, LogWriteError, OffsetsLog};

/// An in-memory `__consumer_offsets`: the coordinator's real store, minus the broker.
#[derive(Default)]
pub(crate) struct MemoryLog(pub(crate) Mutex<Vec<LogEntry>>);

impl OffsetsLog for MemoryLog {
    fn append(
        &self,
        _group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), LogWriteError> {
        self.0.lock().expect("log lock").extend(
            records
                .into_iter()
                .map(|(key, value)| LogEntry::Record { key, value }),
        );
        Ok(())
    }

    fn append_transactional(
        &self,
        _group: &str,
        producer_id: i64,
        _producer_epoch: i16,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<i32, LogWriteError> {
        self.0
            .lock()
            .expect("log lock")
            .extend(
                records
                    .into_iter()
                    .map(|(key, value)| LogEntry::Transactional {
                        partition: 0,
                        producer_id,
                        key,
                        value,
                    }),
            );
        Ok(0)
    }

    fn replay(&self) -> io::Result<Vec<LogEntry>> {
        Ok(self.0.lock().expect("log lock").clone())
    }

    fn resolve_topic(&self, _name: &str) -> Option<(uuid::Uuid, i32)> {
        None
    }

    fn topic_name(&self, _id: &uuid::Uuid) -> Option<String> {
        None
    }
}

/// A group coordinator config with no initial rebalance delay and wide session bounds.
pub(crate) fn test_config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay: Duration::ZERO,
        min_session_timeout: Duration::from_millis(1),
        max_session_timeout: Duration::from_secs(600),
        offsets_retention: Duration::from_secs(3600),
        offset_metadata_max_bytes: 4096,
        consumer_session_timeout: Duration::from_secs(45),
        consumer_heartbeat_interval: Duration::from_secs(5),
        migration: Default::default(),
    }
}
