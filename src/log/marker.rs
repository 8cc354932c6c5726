//! COMMIT/ABORT transaction markers: the control batch Kafka writes for WriteTxnMarkers, and
//! the two fields the log reads back from one (the marker type and the coordinator epoch).
//! Pure codec, no I/O.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};

/// A COMMIT or ABORT marker to append, as a transaction coordinator asks for it
/// (WriteTxnMarkers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    /// The transaction version of the transaction it ends (KIP-890): with 2 the coordinator
    /// bumped the epoch to end it, so a marker that ends a transaction ongoing here must
    /// carry an epoch above the one of its records.
    pub transaction_version: i16,
}

pub(super) const MARKER_ABORT: i16 = 0;
const MARKER_COMMIT: i16 = 1;

/// The type of the COMMIT/ABORT marker in a control batch (key: version i16, type i16).
pub(super) fn marker_type(raw: &[u8]) -> Option<i16> {
    let key = first_record_field(raw, |r| r.key)?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

/// The coordinator epoch in a COMMIT/ABORT marker's value (version i16, epoch i32).
pub(super) fn marker_coordinator_epoch(raw: &[u8]) -> Option<i32> {
    let value = first_record_field(raw, |r| r.value)?;
    (value.len() >= 6).then(|| i32::from_be_bytes([value[2], value[3], value[4], value[5]]))
}

/// Largest control batch read for its marker (a marker record is a few bytes).
const MAX_MARKER_BATCH_BYTES: u64 = 1 << 20;

/// A field of the first record of a control batch, copied out (a few bytes).
fn first_record_field(
    raw: &[u8],
    field: impl for<'a> Fn(&strata_records::Record<&'a [u8]>) -> Option<&'a [u8]>,
) -> Option<Vec<u8>> {
    let header = strata_records::BatchHeader::parse(raw).ok()?;
    let mut buf = Vec::new();
    let mut records =
        strata_records::records_of(raw, &header, MAX_MARKER_BATCH_BYTES, &mut buf).ok()?;
    let (_, first) = records.next()?.ok()?;
    field(&first).map(<[u8]>::to_vec)
}

/// A control batch holding one COMMIT or ABORT marker, as Kafka writes it (uncompressed,
/// transactional, no sequence; value: version 0 and the coordinator epoch).
pub(super) fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    now_ms: i64,
) -> Result<Vec<u8>, String> {
    let kind = if commit { MARKER_COMMIT } else { MARKER_ABORT };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = kafka_protocol::records::Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: now_ms,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        std::iter::once(&record),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| format!("cannot encode a transaction marker: {e}"))?;
    Ok(out.to_vec())
}
