//! RecordBatch v2 bytes to Parquet, without I/O: batches in, rows appended to an
//! [`ArrowWriter`] over any `Write`.
//!
//! Records are walked with `strata_records` (the broker's one record codec), which decompresses
//! under [`ConvertOptions::max_decompressed_batch_bytes`] and bounds every length by the bytes
//! that back it. Not through `RecordBatchDecoder::decode`, for two reasons that change what
//! readers see: its `Record::headers` is a map, so repeated header keys (legal in Kafka) would
//! be merged, and it derives every timestamp from `baseTimestamp + delta`, while a
//! `LogAppendTime` batch's records all carry the batch's `maxTimestamp`.
//!
//! Memory: rows are buffered in Arrow builders up to [`ConvertOptions::batch_rows`] rows or
//! [`ConvertOptions::batch_bytes`] bytes, then handed to the Parquet writer, which flushes a
//! row group at [`ConvertOptions::row_group_bytes`]. One decompressed batch is held at a time.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    Array, ArrayRef, Int32Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::value_schema::{Decoded, ValueColumns, ValueSchema};

/// Size of the RecordBatch v2 header that precedes the records.
pub const BATCH_HEADER_LEN: usize = 61;
/// The batch occupies `LOG_OVERHEAD + batchLength` bytes.
pub const LOG_OVERHEAD: usize = 12;

const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("corrupt batch at offset {offset}: {reason}")]
    Corrupt { offset: i64, reason: String },
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

fn corrupt(offset: i64, reason: impl Into<String>) -> ConvertError {
    ConvertError::Corrupt {
        offset,
        reason: reason.into(),
    }
}

/// The header fields of one RecordBatch v2 that the export needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes the batch occupies, header included.
    pub size: usize,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `b`; `Ok(None)` when `b` holds less than a whole
    /// batch (the caller reads more).
    pub fn parse(b: &[u8]) -> Result<Option<BatchHeader>, ConvertError> {
        if b.len() < LOG_OVERHEAD {
            return Ok(None);
        }
        let base_offset = i64_at(b, 0);
        let length = i32_at(b, 8);
        if length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(corrupt(base_offset, format!("batch length {length}")));
        }
        let size = LOG_OVERHEAD + length as usize;
        if b.len() < size {
            return Ok(None);
        }
        if b[16] != 2 {
            return Err(corrupt(
                base_offset,
                format!("magic {} (only RecordBatch v2 is supported)", b[16] as i8),
            ));
        }
        Ok(Some(BatchHeader {
            base_offset,
            size,
            attributes: i16_at(b, 21),
            last_offset_delta: i32_at(b, 23),
            base_timestamp: i64_at(b, 27),
            max_timestamp: i64_at(b, 35),
            producer_id: i64_at(b, 43),
            records_count: i32_at(b, 57),
        }))
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// An aborted transaction, from a segment's `.txnindex`: the producer's records with offsets
/// in `first_offset..=last_offset` (the ABORT marker) are not exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

impl AbortedTxn {
    /// Parses `.txnindex` bytes (34-byte entries: version, producer id, first offset, last
    /// offset, last stable offset); a torn tail is ignored.
    pub fn parse_index(raw: &[u8]) -> Vec<AbortedTxn> {
        raw.chunks_exact(34)
            .filter(|e| i16_at(e, 0) == 0)
            .map(|e| AbortedTxn {
                producer_id: i64_at(e, 2),
                first_offset: i64_at(e, 10),
                last_offset: i64_at(e, 18),
            })
            .collect()
    }
}

/// The aborted transactions of a partition, for "is this transactional batch aborted?".
#[derive(Debug, Clone, Default)]
pub struct AbortedTxns {
    /// Sorted by (producer id, first offset).
    txns: Vec<AbortedTxn>,
}

impl AbortedTxns {
    pub fn new(mut txns: Vec<AbortedTxn>) -> AbortedTxns {
        txns.sort();
        txns.dedup();
        AbortedTxns { txns }
    }
    pub fn len(&self) -> usize {
        self.txns.len()
    }
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }
    /// True when a transactional batch of `producer_id` at `offset` belongs to an aborted
    /// transaction.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        let end = self
            .txns
            .partition_point(|t| (t.producer_id, t.first_offset) <= (producer_id, offset));
        self.txns[..end]
            .iter()
            .rev()
            .take_while(|t| t.producer_id == producer_id)
            .any(|t| offset <= t.last_offset)
    }
}

/// Parquet layout settings.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Rows per Arrow batch handed to the writer.
    pub batch_rows: usize,
    /// Key+value+header bytes per Arrow batch handed to the writer.
    pub batch_bytes: usize,
    /// A row group is closed when its encoded size passes this (also bounds memory).
    pub row_group_bytes: usize,
    pub zstd_level: i32,
    /// Decode JSON values into typed `value_<name>` columns (see [`super::value_schema`]).
    pub value_schema: Option<Arc<ValueSchema>>,
    /// The most one batch's records may decompress to (the topic's
    /// `strata.max.decompressed.batch.bytes`); a larger batch fails the export as corrupt.
    pub max_decompressed_batch_bytes: u64,
    /// Files for an Iceberg table: Parquet field ids, microsecond timestamps, and (in a
    /// [`FileSet`]) one file per UTC day of the records' timestamps.
    pub iceberg: Option<Arc<IcebergColumns>>,
}

/// The Iceberg field ids of an export's columns: the fixed columns' ids are
/// [`ICEBERG_FIXED_IDS`]; the typed value columns' ids come from the table (by name) or are
/// new, in `value_ids`, in the value schema's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IcebergColumns {
    pub value_ids: Vec<i32>,
}

/// Field ids of the fixed columns (topic .. producer_id), then the headers' element, its key
/// and its value.
pub const ICEBERG_FIXED_IDS: [i32; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];
pub const ICEBERG_HEADER_IDS: [i32; 3] = [10, 11, 12];
/// The highest fixed field id; value columns are numbered after it.
pub const ICEBERG_LAST_FIXED_ID: i32 = 12;

/// The UTC day (days since 1970-01-01) of a timestamp in milliseconds: an Iceberg `day`
/// partition value. Taken from the microseconds the file holds (saturated, as [`micros`]
/// writes them), so that a timestamp near the ends of the range lands on the day its stored
/// value says; every `i64` of microseconds is a day that fits an `i32`.
pub fn day_of(timestamp_ms: i64) -> i32 {
    timestamp_ms.saturating_mul(1000).div_euclid(86_400_000_000) as i32
}

fn with_field_id(f: Field, id: i32) -> Field {
    let meta = f
        .metadata()
        .clone()
        .with(parquet::arrow::PARQUET_FIELD_ID_META_KEY, id.to_string());
    f.with_metadata(meta)
}

/// `f` as an Iceberg column: its id, and a microsecond timestamp where it is milliseconds.
fn iceberg_field(f: &Field, id: i32) -> Field {
    let f = match f.data_type() {
        DataType::Timestamp(TimeUnit::Millisecond, tz) => f
            .clone()
            .with_data_type(DataType::Timestamp(TimeUnit::Microsecond, tz.clone())),
        DataType::List(item) if f.name() == "headers" => {
            let DataType::Struct(children) = item.data_type() else {
                return with_field_id(f.clone(), id);
            };
            let children: Vec<Field> = children
                .iter()
                .zip(&ICEBERG_HEADER_IDS[1..])
                .map(|(c, &cid)| with_field_id((**c).clone(), cid))
                .collect();
            let item = with_field_id(
                (**item)
                    .clone()
                    .with_data_type(DataType::Struct(Fields::from(children))),
                ICEBERG_HEADER_IDS[0],
            );
            f.clone().with_data_type(DataType::List(Arc::new(item)))
        }
        _ => f.clone(),
    };
    with_field_id(f, id)
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            batch_rows: 16 * 1024,
            batch_bytes: 8 << 20,
            row_group_bytes: 64 << 20,
            // Arrow's (and pyarrow's) default level: fast, and smaller files than snappy.
            zstd_level: 1,
            value_schema: None,
            max_decompressed_batch_bytes: 64 << 20,
            iceberg: None,
        }
    }
}

/// The Arrow schema (and so the Parquet schema) of an export with `options`: [`schema`], then
/// the typed value columns if a value schema is set.
/// With [`ConvertOptions::iceberg`], every column carries its Iceberg field id and
/// timestamps are in microseconds (Iceberg's `timestamptz`).
pub fn schema_for(options: &ConvertOptions) -> SchemaRef {
    let mut fields: Vec<Field> = schema().fields().iter().map(|f| (**f).clone()).collect();
    if let Some(v) = &options.value_schema {
        fields.extend(v.arrow_fields());
    }
    if let Some(ice) = &options.iceberg {
        let ids = ICEBERG_FIXED_IDS.iter().chain(&ice.value_ids);
        fields = fields
            .iter()
            .zip(ids)
            .map(|(f, &id)| iceberg_field(f, id))
            .collect();
    }
    Arc::new(Schema::new(fields))
}

/// The export's fixed columns (the schema when no value schema is set).
pub fn schema() -> SchemaRef {
    let header = Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ]);
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("timestamp_type", DataType::Utf8, false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new(
            "headers",
            DataType::List(Arc::new(Field::new(
                "element",
                DataType::Struct(header),
                false,
            ))),
            false,
        ),
        Field::new("producer_id", DataType::Int64, false),
    ]))
}

fn writer_properties(o: &ConvertOptions) -> Result<WriterProperties, ConvertError> {
    let mut p = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(o.zstd_level)?))
        .set_max_row_group_bytes(Some(o.row_group_bytes.max(1)))
        .set_max_row_group_row_count(None)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_created_by("strata export (parquet-rs 60)".to_string());
    for col in ["offset", "timestamp"] {
        p = p.set_column_statistics_enabled(ColumnPath::from(col), EnabledStatistics::Page);
    }
    for col in [
        vec!["key"],
        vec!["value"],
        vec!["headers", "list", "element", "key"],
        vec!["headers", "list", "element", "value"],
    ] {
        let path = ColumnPath::new(col.iter().map(|s| s.to_string()).collect());
        p = p
            .set_column_statistics_enabled(path.clone(), EnabledStatistics::None)
            .set_column_dictionary_enabled(path, false);
    }
    Ok(p.build())
}

/// What one call to [`ParquetFileWriter::push_batch`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pushed {
    pub rows: u64,
    /// Records skipped: outside the range, or control or aborted records.
    pub skipped: u64,
    /// With a value schema: exported records whose value is not a JSON object.
    pub values_not_json: u64,
    /// With a value schema: exported records with a field of the wrong type or missing.
    pub values_mismatched: u64,
    /// A [`FileSet`] already held [`MAX_DAY_FILES`] files and the record at this offset needs
    /// another: nothing from here on was taken; the range ends here.
    pub cut: Option<i64>,
}

/// The most files (days) one range of an Iceberg export writes at once: records stamped
/// across many days (a producer's clock, or a hostile one) end the range early instead of
/// holding a Parquet writer and a spool file open per day.
pub const MAX_DAY_FILES: usize = 16;

/// Which records of the log are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordFilter {
    /// Offsets `from..to`.
    pub from: i64,
    pub to: i64,
    /// Skip records until the first whose timestamp is at or after this, then take every
    /// record (a consumer that seeks by time). Cleared once a record qualifies.
    pub from_time: Option<i64>,
    /// Stop at the first record whose timestamp is after this; `to` becomes its offset.
    pub to_time: Option<i64>,
}

impl RecordFilter {
    pub fn offsets(from: i64, to: i64) -> RecordFilter {
        RecordFilter {
            from,
            to,
            from_time: None,
            to_time: None,
        }
    }
}

/// Rows of one Parquet file being written.
pub struct ParquetFileWriter<W: Write + Send> {
    topic: String,
    partition: i32,
    options: ConvertOptions,
    schema: SchemaRef,
    writer: ArrowWriter<W>,
    rows: Rows,
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub row_count: u64,
    pub min_timestamp: Option<i64>,
    pub max_timestamp: Option<i64>,
    /// Rows whose value is not a JSON object (with a value schema).
    pub values_not_json: u64,
    /// Rows whose JSON value mismatches the value schema.
    pub values_mismatched: u64,
}

struct Rows {
    len: usize,
    bytes: usize,
    offset: Int64Builder,
    timestamp: TimestampMillisecondBuilder,
    timestamp_type: StringBuilder,
    key: BinaryBuilder,
    value: BinaryBuilder,
    headers: ListBuilder<StructBuilder>,
    producer_id: Int64Builder,
    values: Option<ValueColumns>,
}

/// Builder sizes for the next Arrow batch, taken from the previous one (batches of a file are
/// alike), so the builders do not grow (reallocate and copy) while rows are appended.
#[derive(Debug, Clone, Copy, Default)]
struct RowsCapacity {
    rows: usize,
    key_bytes: usize,
    value_bytes: usize,
    headers: usize,
    header_key_bytes: usize,
    header_value_bytes: usize,
}

impl RowsCapacity {
    /// Room for `n` plus an eighth: the next batch may end a Kafka batch later.
    fn with_slack(n: usize) -> usize {
        n + n / 8
    }
}

impl Rows {
    fn new(schema: &Schema, value_schema: Option<&Arc<ValueSchema>>, cap: RowsCapacity) -> Rows {
        let item = match schema.field(7).data_type() {
            DataType::List(f) => (**f).clone(),
            _ => Field::new("element", DataType::Struct(Fields::empty()), false),
        };
        let header_fields = match item.data_type() {
            DataType::Struct(fields) => fields.clone(),
            _ => Fields::empty(),
        };
        let slack = RowsCapacity::with_slack;
        let rows = slack(cap.rows);
        let headers = slack(cap.headers);
        let header_builders: Vec<Box<dyn ArrayBuilder>> = vec![
            Box::new(StringBuilder::with_capacity(
                headers,
                slack(cap.header_key_bytes),
            )),
            Box::new(BinaryBuilder::with_capacity(
                headers,
                slack(cap.header_value_bytes),
            )),
        ];
        Rows {
            len: 0,
            bytes: 0,
            offset: Int64Builder::with_capacity(rows),
            timestamp: TimestampMillisecondBuilder::with_capacity(rows).with_timezone("UTC"),
            timestamp_type: StringBuilder::with_capacity(rows, rows * "LogAppendTime".len()),
            key: BinaryBuilder::with_capacity(rows, slack(cap.key_bytes)),
            value: BinaryBuilder::with_capacity(rows, slack(cap.value_bytes)),
            headers: ListBuilder::with_capacity(
                StructBuilder::new(header_fields, header_builders),
                rows,
            )
            .with_field(Arc::new(item)),
            producer_id: Int64Builder::with_capacity(rows),
            values: value_schema.map(|v| ValueColumns::new(v.clone())),
        }
    }

    /// What this batch used, as the capacity of the next.
    fn capacity(&mut self) -> RowsCapacity {
        let hb = self.headers.values();
        let headers = hb.len();
        let header_key_bytes = field_builder::<StringBuilder>(hb, 0).values_slice().len();
        let header_value_bytes = field_builder::<BinaryBuilder>(hb, 1).values_slice().len();
        RowsCapacity {
            rows: self.len,
            key_bytes: self.key.values_slice().len(),
            value_bytes: self.value.values_slice().len(),
            headers,
            header_key_bytes,
            header_value_bytes,
        }
    }
}

impl<W: Write + Send> ParquetFileWriter<W> {
    pub fn new(
        out: W,
        topic: &str,
        partition: i32,
        options: &ConvertOptions,
    ) -> Result<Self, ConvertError> {
        let schema = schema_for(options);
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(writer_properties(options)?))?;
        let rows = Rows::new(
            &schema,
            options.value_schema.as_ref(),
            RowsCapacity::default(),
        );
        Ok(ParquetFileWriter {
            topic: topic.to_string(),
            partition,
            options: options.clone(),
            schema,
            writer,
            rows,
            first_offset: None,
            last_offset: None,
            row_count: 0,
            min_timestamp: None,
            max_timestamp: None,
            values_not_json: 0,
            values_mismatched: 0,
        })
    }

    /// Encoded bytes so far (written plus buffered), for splitting files by size.
    pub fn approximate_size(&self) -> usize {
        self.writer.bytes_written() + self.writer.in_progress_size() + self.rows.bytes
    }

    /// Appends the exportable records of one whole batch (`batch` starts at its header):
    /// those with `from <= offset < to`, unless the batch is a control batch or belongs to an
    /// aborted transaction.
    pub fn push_batch(
        &mut self,
        header: &BatchHeader,
        batch: &Bytes,
        filter: &mut RecordFilter,
        aborted: &AbortedTxns,
    ) -> Result<Pushed, ConvertError> {
        if let Some(skipped) = skipped_whole(header, filter, aborted) {
            return Ok(skipped);
        }
        let mut pushed = Pushed::default();
        let max = self.options.max_decompressed_batch_bytes;
        for_each_record(header, batch, max, |record| {
            let (offset, timestamp) = offset_and_timestamp(header, record);
            if admit(filter, offset, timestamp, &mut pushed) {
                self.append(header, record, offset, timestamp, &mut pushed)?;
            }
            Ok(())
        })?;
        self.write_rows_if_full()?;
        Ok(pushed)
    }

    fn write_rows_if_full(&mut self) -> Result<(), ConvertError> {
        if self.rows.len >= self.options.batch_rows || self.rows.bytes >= self.options.batch_bytes {
            self.write_rows()?;
        }
        Ok(())
    }

    fn append(
        &mut self,
        header: &BatchHeader,
        record: &strata_records::Record<&[u8]>,
        offset: i64,
        timestamp: i64,
        pushed: &mut Pushed,
    ) -> Result<(), String> {
        let key = record.key;
        let value = record.value;
        let r = &mut self.rows;
        let hb = r.headers.values();
        let mut header_bytes = 0;
        for h in strata_records::HeaderIter::new(record.headers, record.header_count) {
            let (k, v) = h.map_err(|e| e.to_string())?;
            header_bytes += k.len() + v.map_or(0, <[u8]>::len);
            match std::str::from_utf8(k) {
                Ok(s) => field_builder::<StringBuilder>(hb, 0).append_value(s),
                Err(_) => {
                    field_builder::<StringBuilder>(hb, 0).append_value(String::from_utf8_lossy(k))
                }
            }
            field_builder::<BinaryBuilder>(hb, 1).append_option(v);
            hb.append(true);
        }
        r.headers.append(true);
        r.offset.append_value(offset);
        r.timestamp.append_value(timestamp);
        r.timestamp_type
            .append_value(if header.is_log_append_time() {
                "LogAppendTime"
            } else {
                "CreateTime"
            });
        r.bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + header_bytes + 32;
        r.key.append_option(key);
        r.value.append_option(value);
        if let Some(columns) = &mut r.values {
            match columns.append(value, &mut r.bytes) {
                Decoded::NotJson => {
                    pushed.values_not_json += 1;
                    self.values_not_json += 1;
                }
                Decoded::Mismatched => {
                    pushed.values_mismatched += 1;
                    self.values_mismatched += 1;
                }
                Decoded::Typed | Decoded::Null => {}
            }
        }
        r.producer_id.append_value(header.producer_id);
        r.len += 1;
        self.first_offset.get_or_insert(offset);
        self.last_offset = Some(offset);
        self.row_count += 1;
        self.min_timestamp = Some(self.min_timestamp.map_or(timestamp, |m| m.min(timestamp)));
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |m| m.max(timestamp)));
        pushed.rows += 1;
        Ok(())
    }

    fn write_rows(&mut self) -> Result<(), ConvertError> {
        let n = self.rows.len;
        if n == 0 {
            return Ok(());
        }
        let cap = self.rows.capacity();
        let fresh = Rows::new(&self.schema, self.options.value_schema.as_ref(), cap);
        let mut r = std::mem::replace(&mut self.rows, fresh);
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                self.topic.as_str(),
                n,
            ))),
            Arc::new(Int32Array::from_value(self.partition, n)),
            Arc::new(r.offset.finish()),
            Arc::new(r.timestamp.finish()),
            Arc::new(r.timestamp_type.finish()),
            Arc::new(r.key.finish()),
            Arc::new(r.value.finish()),
            Arc::new(r.headers.finish()),
            Arc::new(r.producer_id.finish()),
        ];
        if let Some(values) = &mut r.values {
            columns.extend(values.finish());
        }
        if self.options.iceberg.is_some() {
            columns = columns.into_iter().map(micros).collect();
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        Ok(())
    }

    /// Writes the buffered rows and the footer; returns the output.
    pub fn finish(mut self) -> Result<W, ConvertError> {
        self.write_rows()?;
        Ok(self.writer.into_inner()?)
    }
}

/// `Some` (every record skipped) when nothing of the batch is exported: a control batch, an
/// aborted transaction's, or one wholly outside `filter`'s offsets.
fn skipped_whole(
    header: &BatchHeader,
    filter: &RecordFilter,
    aborted: &AbortedTxns,
) -> Option<Pushed> {
    let skip = header.is_control()
        || (header.is_transactional()
            && aborted.is_aborted(header.producer_id, header.base_offset))
        || header.next_offset() <= filter.from
        || header.base_offset >= filter.to;
    skip.then(|| Pushed {
        skipped: header.records_count.max(0) as u64,
        ..Pushed::default()
    })
}

/// Checks a batch's CRC and calls `each` with every record, refusing a batch that holds
/// another number of records than it declares.
fn for_each_record(
    header: &BatchHeader,
    batch: &Bytes,
    max_decompressed_batch_bytes: u64,
    mut each: impl FnMut(&strata_records::Record<&[u8]>) -> Result<(), String>,
) -> Result<(), ConvertError> {
    let base = header.base_offset;
    let stored = i32_at(batch, 17) as u32;
    let computed = crc32c::crc32c(&batch[21..header.size]);
    if stored != computed {
        return Err(corrupt(
            base,
            format!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    let whole = &batch[..header.size];
    let parsed =
        strata_records::BatchHeader::parse(whole).map_err(|e| corrupt(base, e.to_string()))?;
    let mut plain = Vec::new();
    let records =
        strata_records::records_of(whole, &parsed, max_decompressed_batch_bytes, &mut plain)
            .map_err(|e| corrupt(base, e.to_string()))?;
    let mut found = 0;
    for item in records.take(header.records_count.max(0) as usize) {
        let (_, record) = item.map_err(|e| corrupt(base, e.to_string()))?;
        found += 1;
        each(&record).map_err(|reason| corrupt(base, reason))?;
    }
    if found != header.records_count.max(0) {
        return Err(corrupt(
            base,
            format!(
                "batch declares {} records but holds {found}",
                header.records_count
            ),
        ));
    }
    Ok(())
}

/// A record's offset and timestamp (a `LogAppendTime` batch's records all carry its
/// `maxTimestamp`).
fn offset_and_timestamp(
    header: &BatchHeader,
    record: &strata_records::Record<&[u8]>,
) -> (i64, i64) {
    let offset = header.base_offset + record.offset_delta as i64;
    let timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    };
    (offset, timestamp)
}

/// Whether `filter` exports this record; counts it as skipped if not. The first record past
/// `to_time` ends the range there; the first at or after `from_time` ends the time seek.
fn admit(filter: &mut RecordFilter, offset: i64, timestamp: i64, pushed: &mut Pushed) -> bool {
    if offset < filter.from || offset >= filter.to {
        pushed.skipped += 1;
        return false;
    }
    if filter.to_time.is_some_and(|t| timestamp > t) {
        filter.to = offset;
        pushed.skipped += 1;
        return false;
    }
    if let Some(t) = filter.from_time {
        if timestamp < t {
            pushed.skipped += 1;
            return false;
        }
        filter.from_time = None;
    }
    true
}

/// The files one range of a partition is written to: a single file, or for an Iceberg
/// table one per UTC day of the records' timestamps (a data file holds one partition value).
/// Each file carries `S`, what its opener returned with it (where it is spooled).
pub struct FileSet<W: Write + Send, S> {
    topic: String,
    partition: i32,
    options: ConvertOptions,
    pub files: BTreeMap<i32, (ParquetFileWriter<W>, S)>,
}

impl<W: Write + Send, S> FileSet<W, S> {
    pub fn new(topic: &str, partition: i32, options: &ConvertOptions) -> Self {
        FileSet {
            topic: topic.to_string(),
            partition,
            options: options.clone(),
            files: BTreeMap::new(),
        }
    }

    /// Encoded bytes so far over all files.
    pub fn approximate_size(&self) -> usize {
        self.files.values().map(|(w, _)| w.approximate_size()).sum()
    }

    /// As [`ParquetFileWriter::push_batch`], each record into its day's file, opened with
    /// `open` when it is the first of its day. At most [`MAX_DAY_FILES`] files: a record that
    /// needs one more stops the push there ([`Pushed::cut`]), and the caller closes this set
    /// and pushes the rest of the batch into a new one.
    pub fn push_batch<E: From<ConvertError>>(
        &mut self,
        header: &BatchHeader,
        batch: &Bytes,
        filter: &mut RecordFilter,
        aborted: &AbortedTxns,
        open: &mut dyn FnMut() -> Result<(W, S), E>,
    ) -> Result<Pushed, E> {
        if let Some(skipped) = skipped_whole(header, filter, aborted) {
            return Ok(skipped);
        }
        let mut pushed = Pushed::default();
        let by_day = self.options.iceberg.is_some();
        let max = self.options.max_decompressed_batch_bytes;
        let mut failed: Option<E> = None;
        for_each_record(header, batch, max, |record| {
            if pushed.cut.is_some() {
                return Ok(());
            }
            let (offset, timestamp) = offset_and_timestamp(header, record);
            let key = if by_day { day_of(timestamp) } else { 0 };
            let new_day = !self.files.contains_key(&key);
            if new_day
                && self.files.len() >= MAX_DAY_FILES
                && (filter.from..filter.to).contains(&offset)
            {
                pushed.cut = Some(offset);
                return Ok(());
            }
            if !admit(filter, offset, timestamp, &mut pushed) {
                return Ok(());
            }
            let (writer, _) = match self.files.entry(key) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let opened = open().and_then(|(out, spool)| {
                        ParquetFileWriter::new(out, &self.topic, self.partition, &self.options)
                            .map(|w| (w, spool))
                            .map_err(E::from)
                    });
                    match opened {
                        Ok(f) => e.insert(f),
                        Err(err) => {
                            failed = Some(err);
                            return Err("could not open an export file".to_string());
                        }
                    }
                }
            };
            writer.append(header, record, offset, timestamp, &mut pushed)
        })
        .map_err(|e| failed.take().unwrap_or_else(|| E::from(e)))?;
        for (writer, _) in self.files.values_mut() {
            writer.write_rows_if_full()?;
        }
        Ok(pushed)
    }
}

/// A millisecond timestamp column as microseconds (Iceberg's unit); other columns as they are.
fn micros(column: ArrayRef) -> ArrayRef {
    match column.as_any().downcast_ref::<TimestampMillisecondArray>() {
        Some(ms) => {
            let tz = ms.timezone().map(str::to_string);
            let us = ms.unary::<_, TimestampMicrosecondType>(|v| v.saturating_mul(1000));
            Arc::new(us.with_timezone_opt(tz))
        }
        None => column,
    }
}

fn field_builder<T: ArrayBuilder>(b: &mut StructBuilder, i: usize) -> &mut T {
    // The struct's fields are built from the schema above: 0 is Utf8, 1 is Binary.
    b.field_builder::<T>(i)
        .expect("header struct fields match the schema")
}
