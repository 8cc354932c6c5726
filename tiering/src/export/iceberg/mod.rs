//! Apache Iceberg tables over the Parquet export: `strata export --iceberg` makes each
//! topic's export directory (`<out>/topic=T`) an Iceberg format-version-2 table that
//! pyiceberg, DuckDB, Spark and Trino read, in the filesystem-catalog layout
//! (`topic=T/metadata/v<N>.metadata.json` plus `version-hint.text`, as Hadoop catalogs and
//! DuckDB's `iceberg_scan` find it), in a directory or a bucket.
//!
//! Table: the export's columns with Iceberg field ids (also written into every Parquet file,
//! so readers match columns by id), timestamps as `timestamptz` (microseconds), partitioned by
//! Kafka partition (identity) and by `day(timestamp)`. A data file holds one partition value,
//! so an Iceberg export writes one file per UTC day of the records' timestamps for each range
//! of offsets ([`super::convert::FileSet`]).
//!
//! Exactly once. Files land and each partition's checkpoint moves exactly as in a plain
//! export (see [`super`]); the table is committed after them, and the snapshot records how
//! far each partition is in the table (`strata.export.next-offsets` in its summary, as Kafka
//! Connect's Iceberg sink keeps its offsets). A commit adds, per partition, the landed files
//! whose first offset is at or past the table's offset and whose last is below the
//! checkpoint's: a file is in the table iff its records are below the table's offset, so a
//! file is never added twice, and as the checkpoint never passes a record that is not in a
//! landed file, none is left out. A crash anywhere leaves the table at its last commit; the
//! next export (or commit) adds what landed since. File names say their offsets and their
//! ranges never overlap (checked; an overlap, as from a plain export into the same directory,
//! fails the commit with a message).
//!
//! Commit: write the manifest of the new files and the manifest list (the previous snapshot's
//! manifests plus it), then create `v<N+1>.metadata.json` only if it does not exist (a hard
//! link in a directory, a conditional PUT in a bucket): of two committers one wins and the
//! other reloads and tries again; unreferenced manifests of a lost race or a crash are
//! harmless. `version-hint.text` is rewritten after; readers that follow it may see the
//! previous version until then, and the committer itself finds the newest version by listing.
//!
//! REST catalogs ([`rest`], [`Catalog::Rest`]): the same files, the table registered with the
//! catalog and each commit sent to it as updates with requirements, instead of
//! `v<N+1>.metadata.json`.
//!
//! Schema evolution: typed value columns keep their field ids by name across exports; a value
//! schema that gains a field adds a column (a new schema; older files read it as null), and a
//! field whose type changed is refused.

pub mod avro;
mod maintenance;
pub mod rest;

use std::collections::{BTreeMap, HashMap};

use arrow_schema::{DataType, Field};
use bytes::Bytes;
use serde_json::{json, Value as Json};

use super::convert::{
    schema_for, ConvertOptions, IcebergColumns, ICEBERG_FIXED_IDS, ICEBERG_LAST_FIXED_ID,
};
use super::target::{self, Target};
use super::ExportError;
use avro::Value;

/// The snapshot summary key with each partition's next offset in the table (a JSON object
/// from partition to offset, in a string).
pub const NEXT_OFFSETS: &str = "strata.export.next-offsets";
const PARTITION_FIELD_ID: i32 = 1000;
const DAY_FIELD_ID: i32 = 1001;
const MAX_COMMIT_ATTEMPTS: usize = 10;
const MICROS_PER_DAY: i64 = 86_400_000_000;

fn table_error(msg: impl Into<String>) -> ExportError {
    ExportError::Table(msg.into())
}

/// `topic=T/metadata/<name>`.
fn metadata_rel(topic: &str, name: &str) -> String {
    format!("topic={topic}/metadata/{name}")
}

/// A table's newest metadata.
#[derive(Debug, Clone)]
pub struct Table {
    /// The `v<N>.metadata.json` of a filesystem table (0 for a REST catalog's).
    pub version: u64,
    pub metadata: Json,
    /// Where a REST catalog says the metadata is (`None`: the filesystem layout's file).
    pub location: Option<String>,
}

/// The entry of `metadata[list]` whose `key` is `id` (a snapshot or a schema).
fn find_by_id<'a>(metadata: &'a Json, list: &str, key: &str, id: i64) -> Option<&'a Json> {
    metadata
        .get(list)?
        .as_array()?
        .iter()
        .find(|e| e.get(key).and_then(Json::as_i64) == Some(id))
}

impl Table {
    fn current_snapshot(&self) -> Option<&Json> {
        let id = self.metadata.get("current-snapshot-id")?.as_i64()?;
        find_by_id(&self.metadata, "snapshots", "snapshot-id", id)
    }

    fn summary_i64(&self, key: &str) -> i64 {
        self.current_snapshot()
            .and_then(|s| s.get("summary")?.get(key)?.as_str()?.parse().ok())
            .unwrap_or(0)
    }

    /// How far each partition's records are in the table.
    pub fn next_offsets(&self) -> Result<BTreeMap<i32, i64>, ExportError> {
        let Some(raw) = self
            .current_snapshot()
            .and_then(|s| s.get("summary")?.get(NEXT_OFFSETS)?.as_str())
        else {
            return Ok(BTreeMap::new());
        };
        let map: BTreeMap<String, i64> = serde_json::from_str(raw)
            .map_err(|e| table_error(format!("snapshot summary {NEXT_OFFSETS}: {e}")))?;
        map.into_iter()
            .map(|(p, o)| {
                p.parse::<i32>()
                    .map(|p| (p, o))
                    .map_err(|_| table_error(format!("{NEXT_OFFSETS}: partition '{p}'")))
            })
            .collect()
    }

    fn current_schema(&self) -> Option<&Json> {
        let id = self.metadata.get("current-schema-id")?.as_i64()?;
        find_by_id(&self.metadata, "schemas", "schema-id", id)
    }

    fn last_column_id(&self) -> i32 {
        self.metadata
            .get("last-column-id")
            .and_then(Json::as_i64)
            .unwrap_or(0) as i32
    }

    /// The location of this version's metadata file.
    fn metadata_location(&self, target: &Target, topic: &str) -> String {
        if let Some(l) = &self.location {
            return l.clone();
        }
        target.location(&metadata_rel(
            topic,
            &format!("v{}.metadata.json", self.version),
        ))
    }
}

/// The table of `topic` in `target`, or `None` when there is none: the highest
/// `v<N>.metadata.json` listed (the version hint may lag a crash).
pub async fn load(target: &Target, topic: &str) -> Result<Option<Table>, ExportError> {
    let listed = target
        .list_dir(topic, &format!("topic={topic}/metadata"))
        .await?;
    let newest = listed
        .iter()
        .filter_map(|(n, _)| {
            n.strip_prefix('v')?
                .strip_suffix(".metadata.json")?
                .parse::<u64>()
                .ok()
        })
        .max();
    let Some(version) = newest else {
        return Ok(None);
    };
    let name = format!("v{version}.metadata.json");
    let raw = target
        .read_object(topic, &metadata_rel(topic, &name))
        .await?
        .ok_or_else(|| table_error(format!("{name} disappeared while it was read")))?;
    let metadata: Json =
        serde_json::from_slice(&raw).map_err(|e| table_error(format!("{name}: {e}")))?;
    match metadata.get("format-version").and_then(Json::as_i64) {
        Some(2) => {}
        v => {
            return Err(table_error(format!(
                "{name}: format-version {v:?}, Strata writes version 2 tables"
            )))
        }
    }
    Ok(Some(Table {
        version,
        metadata,
        location: None,
    }))
}

/// The field ids of the export's typed value columns: a column the table has keeps its id
/// (its type must not have changed); a new one is numbered after the table's last column.
pub fn columns(
    options: &ConvertOptions,
    table: Option<&Table>,
) -> Result<IcebergColumns, ExportError> {
    let Some(values) = &options.value_schema else {
        return Ok(IcebergColumns::default());
    };
    let existing: HashMap<&str, &Json> = table
        .and_then(Table::current_schema)
        .and_then(|s| s.get("fields")?.as_array())
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| Some((f.get("name")?.as_str()?, f)))
                .collect()
        })
        .unwrap_or_default();
    let mut next = table
        .map_or(0, Table::last_column_id)
        .max(ICEBERG_LAST_FIXED_ID);
    let mut ids = Vec::new();
    for f in values.arrow_fields() {
        match existing.get(f.name().as_str()) {
            Some(old) => {
                let want = iceberg_type(&f, 0)?;
                if old.get("type") != Some(&want) {
                    return Err(table_error(format!(
                        "column {} is {} in the table but {} in the value schema: export \
                         into a new table (another --out)",
                        f.name(),
                        old.get("type").unwrap_or(&Json::Null),
                        want
                    )));
                }
                let id = old.get("id").and_then(Json::as_i64).unwrap_or(0) as i32;
                ids.push(id);
            }
            None => {
                next += 1;
                ids.push(next);
            }
        }
    }
    Ok(IcebergColumns { value_ids: ids })
}

fn field_id(f: &Field) -> Result<i32, ExportError> {
    f.metadata()
        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| table_error(format!("column {} has no field id", f.name())))
}

/// The Iceberg type of an export column (with the ids of a list's element and a struct's
/// fields from their field metadata).
fn iceberg_type(f: &Field, depth: usize) -> Result<Json, ExportError> {
    Ok(match f.data_type() {
        DataType::Utf8 => json!("string"),
        DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float64 => json!("double"),
        DataType::Boolean => json!("boolean"),
        DataType::Binary => json!("binary"),
        DataType::Timestamp(_, Some(_)) => json!("timestamptz"),
        DataType::Timestamp(_, None) => json!("timestamp"),
        DataType::List(item) if depth < 4 => json!({
            "type": "list",
            "element-id": field_id(item)?,
            "element": iceberg_type(item, depth + 1)?,
            "element-required": !item.is_nullable(),
        }),
        DataType::Struct(fields) if depth < 4 => json!({
            "type": "struct",
            "fields": fields
                .iter()
                .map(|c| iceberg_field(c, depth + 1))
                .collect::<Result<Vec<_>, _>>()?,
        }),
        other => return Err(table_error(format!("no Iceberg type for {other}"))),
    })
}

fn iceberg_field(f: &Field, depth: usize) -> Result<Json, ExportError> {
    Ok(json!({
        "id": field_id(f)?,
        "name": f.name(),
        "required": !f.is_nullable(),
        "type": iceberg_type(f, depth)?,
    }))
}

/// The table schema of an export with `options` (whose `iceberg` ids are set).
pub fn schema_json(options: &ConvertOptions, schema_id: i64) -> Result<Json, ExportError> {
    let schema = schema_for(options);
    let fields = schema
        .fields()
        .iter()
        .map(|f| iceberg_field(f, 0))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({"type": "struct", "schema-id": schema_id, "fields": fields}))
}

fn partition_spec() -> Json {
    json!([
        {"name": "partition", "transform": "identity", "source-id": ICEBERG_FIXED_IDS[1],
         "field-id": PARTITION_FIELD_ID},
        {"name": "timestamp_day", "transform": "day", "source-id": ICEBERG_FIXED_IDS[3],
         "field-id": DAY_FIELD_ID},
    ])
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The metadata of a new table with no snapshot.
fn new_table_metadata(location: &str, options: &ConvertOptions) -> Result<Json, ExportError> {
    let schema = schema_json(options, 0)?;
    let last_column_id = options
        .iceberg
        .as_ref()
        .and_then(|c| c.value_ids.iter().max().copied())
        .unwrap_or(0)
        .max(ICEBERG_LAST_FIXED_ID);
    Ok(json!({
        "format-version": 2,
        "table-uuid": uuid::Uuid::new_v4().to_string(),
        "location": location,
        "last-sequence-number": 0,
        "last-updated-ms": now_ms(),
        "last-column-id": last_column_id,
        "current-schema-id": 0,
        "schemas": [schema],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": partition_spec()}],
        "last-partition-id": DAY_FIELD_ID,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {
            "write.format.default": "parquet",
            "strata.export": "true",
        },
        "current-snapshot-id": -1,
        "refs": {},
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": [],
    }))
}

/// Creates the table of `topic` (no snapshot) unless it exists; returns it.
pub async fn create_if_absent(
    target: &Target,
    topic: &str,
    options: &ConvertOptions,
) -> Result<Table, ExportError> {
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        if let Some(t) = load(target, topic).await? {
            return Ok(t);
        }
        let location = target.location(&format!("topic={topic}"));
        let metadata = new_table_metadata(&location, options)?;
        let bytes = Bytes::from(
            serde_json::to_vec_pretty(&metadata).map_err(|e| table_error(e.to_string()))?,
        );
        if target
            .create_object(topic, &metadata_rel(topic, "v1.metadata.json"), bytes)
            .await?
        {
            write_version_hint(target, topic, 1).await?;
            return Ok(Table {
                version: 1,
                metadata,
                location: None,
            });
        }
    }
    Err(table_error(
        "could not create the table: its metadata kept changing",
    ))
}

/// Where a table's current metadata is kept.
#[derive(Clone)]
pub enum Catalog {
    /// The filesystem layout in the target (`version-hint.text`, `v<N>.metadata.json`).
    Files,
    /// A REST catalog, table `topic` in its namespace; the files stay in the target.
    Rest(std::sync::Arc<rest::RestCatalog>),
}

/// The table of `topic`, from `catalog`.
pub async fn load_in(
    catalog: &Catalog,
    target: &Target,
    topic: &str,
) -> Result<Option<Table>, ExportError> {
    match catalog {
        Catalog::Files => load(target, topic).await,
        Catalog::Rest(r) => r.load(topic).await,
    }
}

/// [`create_if_absent`] in `catalog`: a REST table starts as the filesystem layout's
/// `v1.metadata.json` (Strata's field ids), registered with the catalog.
pub async fn create_if_absent_in(
    catalog: &Catalog,
    target: &Target,
    topic: &str,
    options: &ConvertOptions,
) -> Result<Table, ExportError> {
    let Catalog::Rest(r) = catalog else {
        return create_if_absent(target, topic, options).await;
    };
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        if let Some(t) = r.load(topic).await? {
            return Ok(t);
        }
        // The first version of the files layout (an earlier attempt's, if it got that far).
        let first = match load(target, topic).await? {
            Some(t) if t.version == 1 => t,
            Some(t) => {
                return Err(table_error(format!(
                    "{target} holds version {} of a filesystem table of {topic}: a REST \
                     catalog table needs its own target",
                    t.version
                )))
            }
            None => create_if_absent(target, topic, options).await?,
        };
        let location = first.metadata_location(target, topic);
        if let Some(t) = r.register(topic, &location).await? {
            return Ok(t);
        }
    }
    Err(table_error(
        "could not register the table: it kept changing",
    ))
}

/// Readies an Iceberg export of `partitions` of `topic`: sets the column ids of `options`
/// (kept by name from the table, if it exists) and creates the table if it does not. Refuses a
/// target that holds a plain export of the topic (its files have no field ids and may span
/// days).
pub async fn prepare(
    target: &Target,
    topic: &str,
    partitions: &[i32],
    options: &mut ConvertOptions,
) -> Result<Table, ExportError> {
    prepare_in(&Catalog::Files, target, topic, partitions, options).await
}

/// [`prepare`] with the table in `catalog`.
pub async fn prepare_in(
    catalog: &Catalog,
    target: &Target,
    topic: &str,
    partitions: &[i32],
    options: &mut ConvertOptions,
) -> Result<Table, ExportError> {
    let table = load_in(catalog, target, topic).await?;
    if table.is_none() {
        for &p in partitions {
            if target.read_checkpoint(topic, p).await?.0.is_some() {
                return Err(table_error(format!(
                    "{target} holds a plain Parquet export of {topic} (partition {p} has a \
                     checkpoint and there is no Iceberg table): export the table into a new \
                     target"
                )));
            }
        }
    }
    let columns = columns(options, table.as_ref())?;
    options.iceberg = Some(std::sync::Arc::new(columns));
    create_if_absent_in(catalog, target, topic, options).await
}

async fn write_version_hint(target: &Target, topic: &str, version: u64) -> Result<(), ExportError> {
    target
        .put_object(
            topic,
            &metadata_rel(topic, "version-hint.text"),
            Bytes::from(version.to_string()),
        )
        .await
}

/// One landed Parquet file as the table lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFile {
    pub path: String,
    pub size: u64,
    pub records: i64,
    pub partition: i32,
    pub day: i32,
    /// (field id, lower bound, upper bound), in Iceberg's single-value serialization.
    pub bounds: Vec<(i32, Vec<u8>, Vec<u8>)>,
}

/// `<first:020>-<last:020>.parquet` back to its offsets.
fn parse_file_name(name: &str) -> Option<(i64, i64)> {
    let stem = name.strip_suffix(".parquet")?;
    let (a, b) = stem.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The landed files of partition `p` with offsets in `[from, to)`, in offset order, read from
/// their footers.
async fn data_files(
    target: &Target,
    topic: &str,
    p: i32,
    from: i64,
    to: i64,
) -> Result<Vec<DataFile>, ExportError> {
    let dir = target::partition_dir(topic, p);
    let mut named: Vec<(i64, i64, String, u64)> = target
        .list_dir(topic, &dir)
        .await?
        .into_iter()
        .filter_map(|(name, size)| {
            let (first, last) = parse_file_name(&name)?;
            (first >= from && last < to).then_some((first, last, name, size))
        })
        .collect();
    named.sort();
    let mut files = Vec::with_capacity(named.len());
    for (first, last, name, size) in named {
        let rel = format!("{dir}/{name}");
        let file = read_data_file(target, topic, &rel, size, p).await?;
        files.push((first, last, file));
    }
    // Files of one range (one per day) interleave; files of one day never overlap. Two that
    // do would put records in the table twice.
    let mut last_of_day: HashMap<i32, (i64, i64)> = HashMap::new();
    for (first, last, file) in &files {
        if let Some(&(a, b)) = last_of_day.get(&file.day) {
            if *first <= b {
                return Err(table_error(format!(
                    "{dir}: files {a}-{b} and {first}-{last} overlap: export into a new --out"
                )));
            }
        }
        last_of_day.insert(file.day, (*first, *last));
    }
    Ok(files.into_iter().map(|(_, _, f)| f).collect())
}

/// A landed file's record count, day and column bounds, from its Parquet footer.
async fn read_data_file(
    target: &Target,
    topic: &str,
    rel: &str,
    size: u64,
    partition: i32,
) -> Result<DataFile, ExportError> {
    use parquet::file::metadata::{FooterTail, ParquetMetaDataReader};
    use parquet::file::statistics::Statistics;
    let bad = |why: String| table_error(format!("{rel}: {why}"));
    if size < 12 {
        return Err(bad("too short for a Parquet file".into()));
    }
    let tail = target.read_range(topic, rel, size - 8..size).await?;
    let tail: [u8; 8] = tail[..]
        .try_into()
        .map_err(|_| bad("short read of the footer".into()))?;
    let footer = FooterTail::try_new(&tail).map_err(|e| bad(e.to_string()))?;
    let len = footer.metadata_length() as u64;
    if len + 8 > size - 4 {
        return Err(bad(format!("footer of {len} bytes in a file of {size}")));
    }
    let raw = target
        .read_range(topic, rel, size - 8 - len..size - 8)
        .await?;
    let meta = ParquetMetaDataReader::decode_metadata(&raw).map_err(|e| bad(e.to_string()))?;
    let schema = meta.file_metadata().schema_descr();
    let records = meta.file_metadata().num_rows();
    let mut bounds: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for (name, id) in [
        ("partition", ICEBERG_FIXED_IDS[1]),
        ("offset", ICEBERG_FIXED_IDS[2]),
        ("timestamp", ICEBERG_FIXED_IDS[3]),
    ] {
        let Some(col) =
            (0..schema.num_columns()).find(|&i| schema.column(i).path().string() == name)
        else {
            return Err(bad(format!("no {name} column")));
        };
        let basic = schema.column(col).self_type().get_basic_info().clone();
        if !basic.has_id() || basic.id() != id {
            return Err(bad(format!(
                "column {name} has no Iceberg field id {id} (written by a plain export?): \
                 export into a new --out"
            )));
        }
        for rg in meta.row_groups() {
            let (lo, hi) = match rg.column(col).statistics() {
                Some(Statistics::Int64(s)) => (s.min_opt().copied(), s.max_opt().copied()),
                Some(Statistics::Int32(s)) => (
                    s.min_opt().map(|&v| i64::from(v)),
                    s.max_opt().map(|&v| i64::from(v)),
                ),
                _ => (None, None),
            };
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return Err(bad(format!("no statistics for column {name}")));
            };
            let e = bounds.entry(id).or_insert((lo, hi));
            *e = (e.0.min(lo), e.1.max(hi));
        }
    }
    let (lo_ts, hi_ts) = bounds
        .get(&ICEBERG_FIXED_IDS[3])
        .copied()
        .ok_or_else(|| bad("no rows".into()))?;
    let day = lo_ts.div_euclid(MICROS_PER_DAY);
    if hi_ts.div_euclid(MICROS_PER_DAY) != day {
        return Err(bad("records of more than one day in one file".into()));
    }
    if let Some(&(lo, hi)) = bounds.get(&ICEBERG_FIXED_IDS[1]) {
        if lo != hi || lo != i64::from(partition) {
            return Err(bad(format!(
                "rows of partitions {lo}..{hi}, expected {partition}"
            )));
        }
    }
    let bounds = bounds
        .into_iter()
        .map(|(id, (lo, hi))| {
            if id == ICEBERG_FIXED_IDS[1] {
                (
                    id,
                    (lo as i32).to_le_bytes().to_vec(),
                    (hi as i32).to_le_bytes().to_vec(),
                )
            } else {
                (id, lo.to_le_bytes().to_vec(), hi.to_le_bytes().to_vec())
            }
        })
        .collect();
    Ok(DataFile {
        path: target.location(rel),
        size,
        records,
        partition,
        day: day as i32,
        bounds,
    })
}

/// What a commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    pub files: usize,
    pub records: i64,
    /// The metadata version now current, and its location.
    pub version: u64,
    pub metadata_location: String,
    pub snapshot_id: Option<i64>,
}

/// The durable steps of a commit, for crash points (the caller's `on_step` runs after each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStep {
    /// The manifest and the manifest list are written; no metadata names them yet.
    ManifestsWritten,
    /// The new metadata version exists; `version-hint.text` still names the previous one.
    MetadataCreated,
}

/// Adds to the table of `topic` every landed file of `partitions` that its checkpoint covers
/// and the table does not yet hold (see the module doc); creates the table if needed.
pub async fn commit(
    target: &Target,
    topic: &str,
    partitions: &[i32],
    options: &ConvertOptions,
) -> Result<Committed, ExportError> {
    commit_with_steps(target, topic, partitions, options, &|_| {}).await
}

/// [`commit`], calling `on_step` after each durable step.
pub async fn commit_with_steps(
    target: &Target,
    topic: &str,
    partitions: &[i32],
    options: &ConvertOptions,
    on_step: &(dyn Fn(CommitStep) + Sync),
) -> Result<Committed, ExportError> {
    commit_in(&Catalog::Files, target, topic, partitions, options, on_step).await
}

/// [`commit_with_steps`] with the table in `catalog`.
pub async fn commit_in(
    catalog: &Catalog,
    target: &Target,
    topic: &str,
    partitions: &[i32],
    options: &ConvertOptions,
    on_step: &(dyn Fn(CommitStep) + Sync),
) -> Result<Committed, ExportError> {
    for _ in 0..MAX_COMMIT_ATTEMPTS {
        let table = create_if_absent_in(catalog, target, topic, options).await?;
        let committed = table.next_offsets()?;
        let mut next = committed.clone();
        let mut files = Vec::new();
        for &p in partitions {
            let (checkpoint, _) = target.read_checkpoint(topic, p).await?;
            let Some(checkpoint) = checkpoint else {
                continue;
            };
            let from = committed.get(&p).copied().unwrap_or(i64::MIN);
            if checkpoint.next_offset <= from {
                continue;
            }
            files.extend(data_files(target, topic, p, from, checkpoint.next_offset).await?);
            next.insert(p, checkpoint.next_offset);
        }
        if files.is_empty() && matches!(catalog, Catalog::Rest(_)) {
            return Ok(Committed {
                metadata_location: table.metadata_location(target, topic),
                snapshot_id: table
                    .current_snapshot()
                    .and_then(|s| s.get("snapshot-id")?.as_i64()),
                ..Committed::default()
            });
        }
        if files.is_empty() {
            // A commit that died before rewriting the hint left it naming an older version.
            let hint = target
                .read_object(topic, &metadata_rel(topic, "version-hint.text"))
                .await?;
            if hint
                .as_deref()
                .map(|h| String::from_utf8_lossy(h).trim().to_string())
                != Some(table.version.to_string())
            {
                write_version_hint(target, topic, table.version).await?;
            }
            return Ok(Committed {
                version: table.version,
                metadata_location: table.metadata_location(target, topic),
                snapshot_id: table
                    .current_snapshot()
                    .and_then(|s| s.get("snapshot-id")?.as_i64()),
                ..Committed::default()
            });
        }
        let staged = stage_snapshot(target, topic, &table, &files, &next, options).await?;
        on_step(CommitStep::ManifestsWritten);
        if let Catalog::Rest(r) = catalog {
            let Some(now) = r.commit(topic, &table, &staged.metadata).await? else {
                continue; // the table moved on: commit again on top of it
            };
            on_step(CommitStep::MetadataCreated);
            delete_lists(target, topic, &staged.expired_lists).await;
            return Ok(Committed {
                files: files.len(),
                records: files.iter().map(|f| f.records).sum(),
                version: 0,
                metadata_location: now.metadata_location(target, topic),
                snapshot_id: Some(staged.snapshot_id),
            });
        }
        let version = table.version + 1;
        let name = format!("v{version}.metadata.json");
        let bytes = Bytes::from(
            serde_json::to_vec_pretty(&staged.metadata).map_err(|e| table_error(e.to_string()))?,
        );
        if target
            .create_object(topic, &metadata_rel(topic, &name), bytes)
            .await?
        {
            on_step(CommitStep::MetadataCreated);
            write_version_hint(target, topic, version).await?;
            delete_lists(target, topic, &staged.expired_lists).await;
            return Ok(Committed {
                files: files.len(),
                records: files.iter().map(|f| f.records).sum(),
                version,
                metadata_location: target.location(&metadata_rel(topic, &name)),
                snapshot_id: Some(staged.snapshot_id),
            });
        }
        // Another commit won this version: start again from it.
    }
    Err(table_error(format!(
        "the table of {topic} changed under {MAX_COMMIT_ATTEMPTS} commit attempts in a row"
    )))
}

/// Deletes the manifest lists of expired snapshots and the manifests only they referenced.
/// Best effort: a file left behind is an orphan, not an error.
async fn delete_lists(target: &Target, topic: &str, lists: &[String]) {
    for list in lists {
        if let Ok(rel) = rel_of(target, list) {
            let _ = target.delete_object(topic, &rel).await;
        }
    }
}

struct Staged {
    metadata: Json,
    snapshot_id: i64,
    /// Manifest lists of the snapshots this commit expires, and the manifests only they
    /// referenced, to delete once it is committed.
    expired_lists: Vec<String>,
}

/// Writes the manifest and manifest list of a snapshot adding `files` to `table`, and returns
/// the metadata that makes it current.
async fn stage_snapshot(
    target: &Target,
    topic: &str,
    table: &Table,
    files: &[DataFile],
    next_offsets: &BTreeMap<i32, i64>,
    options: &ConvertOptions,
) -> Result<Staged, ExportError> {
    let mut metadata = table.metadata.clone();
    let snapshot_id = (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64;
    let sequence = metadata
        .get("last-sequence-number")
        .and_then(Json::as_i64)
        .unwrap_or(0)
        + 1;
    let schema_id = evolve_schema(&mut metadata, options)?;
    let schema = find_by_id(&metadata, "schemas", "schema-id", schema_id)
        .cloned()
        .unwrap_or(Json::Null);

    // The manifest of the new files.
    let manifest_rel = metadata_rel(topic, &format!("{}-m0.avro", uuid::Uuid::new_v4()));
    let entries: Vec<Value> = files
        .iter()
        .map(|f| manifest_entry(f, snapshot_id))
        .collect();
    let header = [
        ("schema", schema.to_string()),
        ("schema-id", schema_id.to_string()),
        ("partition-spec", partition_spec().to_string()),
        ("partition-spec-id", "0".to_string()),
        ("format-version", "2".to_string()),
        ("content", "data".to_string()),
    ];
    let manifest = avro::container_file(MANIFEST_ENTRY_SCHEMA, &header, &entries);
    let manifest_len = manifest.len() as i64;
    target
        .put_object(topic, &manifest_rel, Bytes::from(manifest))
        .await?;

    // The manifest list: the current snapshot's manifests, then the new one.
    let previous = match table
        .current_snapshot()
        .and_then(|s| s.get("manifest-list")?.as_str())
    {
        Some(list) => previous_manifests(target, topic, list).await?,
        None => Vec::new(),
    };
    let mut manifests =
        maintenance::merge_manifests(target, topic, previous, &header, sequence, snapshot_id)
            .await?;
    manifests.push(new_manifest_file(
        &target.location(&manifest_rel),
        manifest_len,
        sequence,
        snapshot_id,
        files,
    ));
    let parent = table
        .current_snapshot()
        .and_then(|s| s.get("snapshot-id")?.as_i64());
    let list_rel = metadata_rel(
        topic,
        &format!("snap-{snapshot_id}-1-{}.avro", uuid::Uuid::new_v4()),
    );
    let list = avro::container_file(
        MANIFEST_FILE_SCHEMA,
        &[
            ("snapshot-id", snapshot_id.to_string()),
            (
                "parent-snapshot-id",
                parent.map_or("null".to_string(), |p| p.to_string()),
            ),
            ("sequence-number", sequence.to_string()),
            ("format-version", "2".to_string()),
        ],
        &manifests,
    );
    target
        .put_object(topic, &list_rel, Bytes::from(list))
        .await?;

    // The metadata.
    let now = now_ms();
    let added_records: i64 = files.iter().map(|f| f.records).sum();
    let added_size: u64 = files.iter().map(|f| f.size).sum();
    let offsets: BTreeMap<String, i64> = next_offsets
        .iter()
        .map(|(p, o)| (p.to_string(), *o))
        .collect();
    let snapshot = json!({
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": now,
        "manifest-list": target.location(&list_rel),
        "schema-id": schema_id,
        "summary": {
            "operation": "append",
            "added-data-files": files.len().to_string(),
            "added-records": added_records.to_string(),
            "added-files-size": added_size.to_string(),
            "total-data-files": (table.summary_i64("total-data-files") + files.len() as i64).to_string(),
            "total-records": (table.summary_i64("total-records") + added_records).to_string(),
            "total-files-size": (table.summary_i64("total-files-size") + added_size as i64).to_string(),
            "total-delete-files": "0",
            "total-position-deletes": "0",
            "total-equality-deletes": "0",
            NEXT_OFFSETS: serde_json::to_string(&offsets).map_err(|e| table_error(e.to_string()))?,
        },
    });
    let mut snapshot = snapshot;
    if let (Some(p), Some(o)) = (parent, snapshot.as_object_mut()) {
        o.insert("parent-snapshot-id".into(), json!(p));
    }
    let previous_location = table.metadata_location(target, topic);
    make_current(&mut metadata, snapshot, &previous_location, now)?;
    let mut expired_lists = maintenance::expire(&mut metadata, now);
    let orphans =
        maintenance::unreferenced_manifests(target, topic, &metadata, &expired_lists, &manifests)
            .await;
    // Deleted with the lists, after the commit.
    expired_lists.extend(orphans);
    Ok(Staged {
        metadata,
        snapshot_id,
        expired_lists,
    })
}

/// Adds `snapshot` to `metadata` as the current one (the main branch), with its log entries;
/// `previous_location` is the metadata file it replaces.
fn make_current(
    metadata: &mut Json,
    snapshot: Json,
    previous_location: &str,
    now: i64,
) -> Result<(), ExportError> {
    let snapshot_id = snapshot.get("snapshot-id").cloned().unwrap_or(Json::Null);
    let sequence = snapshot
        .get("sequence-number")
        .cloned()
        .unwrap_or(Json::Null);
    let previous_updated = metadata
        .get("last-updated-ms")
        .and_then(Json::as_i64)
        .unwrap_or(now);
    let o = metadata
        .as_object_mut()
        .ok_or_else(|| table_error("table metadata is not a JSON object"))?;
    o.insert("last-sequence-number".into(), sequence);
    o.insert("last-updated-ms".into(), json!(now.max(previous_updated)));
    o.insert("current-snapshot-id".into(), snapshot_id.clone());
    o.insert(
        "refs".into(),
        json!({"main": {"snapshot-id": snapshot_id, "type": "branch"}}),
    );
    push(o, "snapshots", snapshot);
    push(
        o,
        "snapshot-log",
        json!({"timestamp-ms": now, "snapshot-id": snapshot_id}),
    );
    push(
        o,
        "metadata-log",
        json!({"timestamp-ms": previous_updated, "metadata-file": previous_location}),
    );
    Ok(())
}

fn push(o: &mut serde_json::Map<String, Json>, key: &str, v: Json) {
    match o.get_mut(key).and_then(Json::as_array_mut) {
        Some(a) => a.push(v),
        None => {
            o.insert(key.to_string(), json!([v]));
        }
    }
}

/// Makes the export's schema the table's current one (adding it when its columns differ);
/// returns its id.
fn evolve_schema(metadata: &mut Json, options: &ConvertOptions) -> Result<i64, ExportError> {
    let current_id = metadata
        .get("current-schema-id")
        .and_then(Json::as_i64)
        .unwrap_or(0);
    let schemas = metadata
        .get("schemas")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let wanted = schema_json(options, 0)?;
    let current = find_by_id(metadata, "schemas", "schema-id", current_id);
    let old_fields = current
        .and_then(|s| s.get("fields"))
        .cloned()
        .unwrap_or(json!([]));
    let new_fields = wanted.get("fields").cloned().unwrap_or(json!([]));
    // Columns the table has and this export does not (a value field dropped) stay, so older
    // files keep them; they must be optional.
    let mut fields: Vec<Json> = new_fields.as_array().cloned().unwrap_or_default();
    for old in old_fields.as_array().into_iter().flatten() {
        if !fields.iter().any(|f| f.get("id") == old.get("id")) {
            let mut kept = old.clone();
            if let Some(o) = kept.as_object_mut() {
                o.insert("required".into(), json!(false));
            }
            fields.push(kept);
        }
    }
    if Json::Array(fields.clone()) == old_fields {
        return Ok(current_id);
    }
    let id = schemas
        .iter()
        .filter_map(|s| s.get("schema-id").and_then(Json::as_i64))
        .max()
        .unwrap_or(-1)
        + 1;
    let max_id = fields
        .iter()
        .filter_map(|f| f.get("id").and_then(Json::as_i64))
        .max()
        .unwrap_or(0);
    let o = metadata
        .as_object_mut()
        .ok_or_else(|| table_error("table metadata is not a JSON object"))?;
    push(
        o,
        "schemas",
        json!({"type": "struct", "schema-id": id, "fields": fields}),
    );
    o.insert("current-schema-id".into(), json!(id));
    let last = o.get("last-column-id").and_then(Json::as_i64).unwrap_or(0);
    o.insert("last-column-id".into(), json!(last.max(max_id)));
    Ok(id)
}

/// The manifests of the snapshot whose manifest list is at `location`, re-encoded under
/// [`MANIFEST_FILE_SCHEMA`] (another engine may have written it with more fields).
async fn previous_manifests(
    target: &Target,
    topic: &str,
    location: &str,
) -> Result<Vec<Value>, ExportError> {
    let rel = rel_of(target, location)?;
    let raw = target
        .read_object(topic, &rel)
        .await?
        .ok_or_else(|| table_error(format!("manifest list {location} is missing")))?;
    decode_manifest_list(&raw).map_err(|e| table_error(format!("manifest list {location}: {e}")))
}

/// `location` relative to the target's root: table metadata names only files of its target.
fn rel_of(target: &Target, location: &str) -> Result<String, ExportError> {
    let base = target.location("");
    location
        .strip_prefix(base.as_str())
        .map(|r| r.trim_start_matches('/').to_string())
        .ok_or_else(|| table_error(format!("{location} is outside the export's target {base}")))
}

/// A manifest list's entries, re-encoded under [`MANIFEST_FILE_SCHEMA`].
pub fn decode_manifest_list(raw: &[u8]) -> Result<Vec<Value>, String> {
    let file = avro::read_container_file(raw).map_err(|e| e.to_string())?;
    file.records
        .iter()
        .map(|r| reencode_manifest_file(r).ok_or_else(|| "an entry lacks a field".to_string()))
        .collect()
}

/// Table metadata as [`load`] reads it: parsed, with each partition's offset in the table.
pub fn decode_metadata(raw: &[u8]) -> Result<(Table, BTreeMap<i32, i64>), ExportError> {
    let metadata: Json = serde_json::from_slice(raw).map_err(|e| table_error(e.to_string()))?;
    let table = Table {
        version: 1,
        metadata,
        location: None,
    };
    let offsets = table.next_offsets()?;
    Ok((table, offsets))
}

fn reencode_manifest_file(r: &Value) -> Option<Value> {
    let long = |names: &[&str]| names.iter().find_map(|n| r.field(n)?.as_long());
    let int = |names: &[&str], default: i64| Value::Int(long(names).unwrap_or(default) as i32);
    let partitions = match r.field("partitions").map(Value::plain) {
        Some(Value::Array(items)) => Value::Union(
            1,
            Box::new(Value::Array(
                items
                    .iter()
                    .map(|p| {
                        let flag = |n: &str| match p.field(n).map(Value::plain) {
                            Some(Value::Boolean(b)) => Some(*b),
                            _ => None,
                        };
                        let bound = |n: &str| match p.field(n).map(Value::plain) {
                            Some(Value::Bytes(b)) => {
                                Value::Union(1, Box::new(Value::Bytes(b.clone())))
                            }
                            _ => Value::Union(0, Box::new(Value::Null)),
                        };
                        Value::Record(vec![
                            (
                                "contains_null".into(),
                                Value::Boolean(flag("contains_null").unwrap_or(true)),
                            ),
                            (
                                "contains_nan".into(),
                                match flag("contains_nan") {
                                    Some(b) => Value::Union(1, Box::new(Value::Boolean(b))),
                                    None => Value::Union(0, Box::new(Value::Null)),
                                },
                            ),
                            ("lower_bound".into(), bound("lower_bound")),
                            ("upper_bound".into(), bound("upper_bound")),
                        ])
                    })
                    .collect(),
            )),
        ),
        _ => Value::Union(0, Box::new(Value::Null)),
    };
    let sequence = long(&["sequence_number"]).unwrap_or(0);
    Some(Value::Record(vec![
        (
            "manifest_path".into(),
            Value::String(r.field("manifest_path")?.as_str()?.to_string()),
        ),
        (
            "manifest_length".into(),
            Value::Long(long(&["manifest_length"])?),
        ),
        ("partition_spec_id".into(), int(&["partition_spec_id"], 0)),
        ("content".into(), int(&["content"], 0)),
        ("sequence_number".into(), Value::Long(sequence)),
        (
            "min_sequence_number".into(),
            Value::Long(long(&["min_sequence_number"]).unwrap_or(sequence)),
        ),
        (
            "added_snapshot_id".into(),
            Value::Long(long(&["added_snapshot_id"])?),
        ),
        (
            "added_files_count".into(),
            int(&["added_files_count", "added_data_files_count"], 0),
        ),
        (
            "existing_files_count".into(),
            int(&["existing_files_count", "existing_data_files_count"], 0),
        ),
        (
            "deleted_files_count".into(),
            int(&["deleted_files_count", "deleted_data_files_count"], 0),
        ),
        (
            "added_rows_count".into(),
            Value::Long(long(&["added_rows_count"]).unwrap_or(0)),
        ),
        (
            "existing_rows_count".into(),
            Value::Long(long(&["existing_rows_count"]).unwrap_or(0)),
        ),
        (
            "deleted_rows_count".into(),
            Value::Long(long(&["deleted_rows_count"]).unwrap_or(0)),
        ),
        ("partitions".into(), partitions),
        (
            "key_metadata".into(),
            Value::Union(0, Box::new(Value::Null)),
        ),
    ]))
}

fn some(v: Value) -> Value {
    Value::Union(1, Box::new(v))
}

fn null() -> Value {
    Value::Union(0, Box::new(Value::Null))
}

fn bounds_map(f: &DataFile, upper: bool) -> Value {
    some(Value::Array(
        f.bounds
            .iter()
            .map(|(id, lo, hi)| {
                Value::Record(vec![
                    ("key".into(), Value::Int(*id)),
                    (
                        "value".into(),
                        Value::Bytes(if upper { hi } else { lo }.clone()),
                    ),
                ])
            })
            .collect(),
    ))
}

fn manifest_entry(f: &DataFile, snapshot_id: i64) -> Value {
    Value::Record(vec![
        ("status".into(), Value::Int(1)),
        ("snapshot_id".into(), some(Value::Long(snapshot_id))),
        // Added files inherit the manifest's sequence number.
        ("sequence_number".into(), null()),
        ("file_sequence_number".into(), null()),
        (
            "data_file".into(),
            Value::Record(vec![
                ("content".into(), Value::Int(0)),
                ("file_path".into(), Value::String(f.path.clone())),
                ("file_format".into(), Value::String("PARQUET".into())),
                (
                    "partition".into(),
                    Value::Record(vec![
                        ("partition".into(), some(Value::Int(f.partition))),
                        ("timestamp_day".into(), some(Value::Int(f.day))),
                    ]),
                ),
                ("record_count".into(), Value::Long(f.records)),
                ("file_size_in_bytes".into(), Value::Long(f.size as i64)),
                ("lower_bounds".into(), bounds_map(f, false)),
                ("upper_bounds".into(), bounds_map(f, true)),
                ("key_metadata".into(), null()),
                ("split_offsets".into(), null()),
                ("sort_order_id".into(), null()),
            ]),
        ),
    ])
}

/// A manifest list's summary of one partition field (an `int`: the Kafka partition or the
/// day) over the values of its files: never null, never NaN, and the bounds.
fn partition_field_summary(values: impl Iterator<Item = i32>) -> Value {
    let (lo, hi) = values.fold((i32::MAX, i32::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo > hi { (0, 0) } else { (lo, hi) };
    Value::Record(vec![
        ("contains_null".into(), Value::Boolean(false)),
        ("contains_nan".into(), some(Value::Boolean(false))),
        (
            "lower_bound".into(),
            some(Value::Bytes(lo.to_le_bytes().to_vec())),
        ),
        (
            "upper_bound".into(),
            some(Value::Bytes(hi.to_le_bytes().to_vec())),
        ),
    ])
}

/// What a manifest holds, for its manifest list entry.
struct ManifestSummary {
    sequence: i64,
    min_sequence: i64,
    snapshot_id: i64,
    /// (files, rows) added by this manifest's snapshot, and existing ones carried over.
    added: (usize, i64),
    existing: (usize, i64),
    /// The Kafka partitions and days of its files.
    partitions: Vec<i32>,
    days: Vec<i32>,
}

/// A manifest list entry for the manifest at `path` of `length` bytes.
fn manifest_file(path: &str, length: i64, m: ManifestSummary) -> Value {
    Value::Record(vec![
        ("manifest_path".into(), Value::String(path.to_string())),
        ("manifest_length".into(), Value::Long(length)),
        ("partition_spec_id".into(), Value::Int(0)),
        ("content".into(), Value::Int(0)),
        ("sequence_number".into(), Value::Long(m.sequence)),
        ("min_sequence_number".into(), Value::Long(m.min_sequence)),
        ("added_snapshot_id".into(), Value::Long(m.snapshot_id)),
        ("added_files_count".into(), Value::Int(m.added.0 as i32)),
        (
            "existing_files_count".into(),
            Value::Int(m.existing.0 as i32),
        ),
        ("deleted_files_count".into(), Value::Int(0)),
        ("added_rows_count".into(), Value::Long(m.added.1)),
        ("existing_rows_count".into(), Value::Long(m.existing.1)),
        ("deleted_rows_count".into(), Value::Long(0)),
        (
            "partitions".into(),
            some(Value::Array(vec![
                partition_field_summary(m.partitions.into_iter()),
                partition_field_summary(m.days.into_iter()),
            ])),
        ),
        ("key_metadata".into(), null()),
    ])
}

fn new_manifest_file(
    path: &str,
    length: i64,
    sequence: i64,
    snapshot_id: i64,
    files: &[DataFile],
) -> Value {
    manifest_file(
        path,
        length,
        ManifestSummary {
            sequence,
            min_sequence: sequence,
            snapshot_id,
            added: (files.len(), files.iter().map(|f| f.records).sum()),
            existing: (0, 0),
            partitions: files.iter().map(|f| f.partition).collect(),
            days: files.iter().map(|f| f.day).collect(),
        },
    )
}

/// The Avro schema of a manifest's entries (Iceberg spec, format version 2), for this
/// table's partition spec.
pub const MANIFEST_ENTRY_SCHEMA: &str = r#"{"type":"record","name":"manifest_entry","fields":[
{"name":"status","type":"int","field-id":0},
{"name":"snapshot_id","type":["null","long"],"default":null,"field-id":1},
{"name":"sequence_number","type":["null","long"],"default":null,"field-id":3},
{"name":"file_sequence_number","type":["null","long"],"default":null,"field-id":4},
{"name":"data_file","type":{"type":"record","name":"r2","fields":[
 {"name":"content","type":"int","doc":"Contents of the file: 0=data, 1=position deletes, 2=equality deletes","field-id":134},
 {"name":"file_path","type":"string","doc":"Location URI with FS scheme","field-id":100},
 {"name":"file_format","type":"string","doc":"File format name: avro, orc, or parquet","field-id":101},
 {"name":"partition","type":{"type":"record","name":"r102","fields":[
  {"name":"partition","type":["null","int"],"default":null,"field-id":1000},
  {"name":"timestamp_day","type":["null",{"type":"int","logicalType":"date"}],"default":null,"field-id":1001}
 ]},"doc":"Partition data tuple, schema based on the partition spec","field-id":102},
 {"name":"record_count","type":"long","doc":"Number of records in the file","field-id":103},
 {"name":"file_size_in_bytes","type":"long","doc":"Total file size in bytes","field-id":104},
 {"name":"lower_bounds","type":["null",{"type":"array","items":{"type":"record","name":"k126_v127","fields":[
  {"name":"key","type":"int","field-id":126},{"name":"value","type":"bytes","field-id":127}]},"logicalType":"map"}],
  "doc":"Map of column id to lower bound","default":null,"field-id":125},
 {"name":"upper_bounds","type":["null",{"type":"array","items":{"type":"record","name":"k129_v130","fields":[
  {"name":"key","type":"int","field-id":129},{"name":"value","type":"bytes","field-id":130}]},"logicalType":"map"}],
  "doc":"Map of column id to upper bound","default":null,"field-id":128},
 {"name":"key_metadata","type":["null","bytes"],"doc":"Encryption key metadata blob","default":null,"field-id":131},
 {"name":"split_offsets","type":["null",{"type":"array","items":"long","element-id":133}],"doc":"Splittable offsets","default":null,"field-id":132},
 {"name":"sort_order_id","type":["null","int"],"doc":"Sort order ID","default":null,"field-id":140}
]},"field-id":2}
]}"#;

/// The Avro schema of a manifest list's entries (Iceberg spec, format version 2).
pub const MANIFEST_FILE_SCHEMA: &str = r#"{"type":"record","name":"manifest_file","fields":[
{"name":"manifest_path","type":"string","doc":"Location URI with FS scheme","field-id":500},
{"name":"manifest_length","type":"long","doc":"Total file size in bytes","field-id":501},
{"name":"partition_spec_id","type":"int","doc":"Spec ID used to write","field-id":502},
{"name":"content","type":"int","doc":"Contents of the manifest: 0=data, 1=deletes","field-id":517},
{"name":"sequence_number","type":"long","doc":"Sequence number when the manifest was added","field-id":515},
{"name":"min_sequence_number","type":"long","doc":"Lowest sequence number in the manifest","field-id":516},
{"name":"added_snapshot_id","type":"long","doc":"Snapshot ID that added the manifest","field-id":503},
{"name":"added_files_count","type":"int","doc":"Added entry count","field-id":504},
{"name":"existing_files_count","type":"int","doc":"Existing entry count","field-id":505},
{"name":"deleted_files_count","type":"int","doc":"Deleted entry count","field-id":506},
{"name":"added_rows_count","type":"long","doc":"Added rows count","field-id":512},
{"name":"existing_rows_count","type":"long","doc":"Existing rows count","field-id":513},
{"name":"deleted_rows_count","type":"long","doc":"Deleted rows count","field-id":514},
{"name":"partitions","type":["null",{"type":"array","items":{"type":"record","name":"r508","fields":[
 {"name":"contains_null","type":"boolean","doc":"True if any file has a null partition value","field-id":509},
 {"name":"contains_nan","type":["null","boolean"],"doc":"True if any file has a nan partition value","default":null,"field-id":518},
 {"name":"lower_bound","type":["null","bytes"],"doc":"Partition lower bound for all files","default":null,"field-id":510},
 {"name":"upper_bound","type":["null","bytes"],"doc":"Partition upper bound for all files","default":null,"field-id":511}
]},"element-id":508}],"doc":"Summary for each partition","default":null,"field-id":507},
{"name":"key_metadata","type":["null","bytes"],"doc":"Encryption key metadata blob","default":null,"field-id":519}
]}"#;

#[cfg(test)]
mod tests;
