//! The Avro object container files Iceberg keeps its manifests and manifest lists in: a writer
//! for the files Strata commits, and a reader of a table's current manifest list (which may
//! have been written by another engine), driven by the writer's schema in the file header.
//!
//! Only what Iceberg metadata uses: Strata writes the `null` codec; the reader also takes
//! `deflate` (what Java Iceberg writes by default), and refuses any other codec by name.
//!
//! The reader trusts nothing: every length and count is checked against the bytes left
//! before anything is allocated, named-type nesting is bounded, and a malformed file is an
//! [`AvroError`], never a panic.

use std::collections::HashMap;

use serde_json::Value as Json;

pub const MAGIC: &[u8; 4] = b"Obj\x01";
/// Deepest nesting of schema types the reader follows.
const MAX_DEPTH: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AvroError {
    #[error("not an Avro object container file")]
    NotAvro,
    #[error("truncated Avro data")]
    Truncated,
    #[error("invalid Avro data: {0}")]
    Invalid(String),
    #[error("unsupported Avro codec '{0}'")]
    Codec(String),
    #[error("invalid Avro schema: {0}")]
    Schema(String),
}

/// A decoded or to-be-encoded Avro datum. Unions carry the branch index.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
    Fixed(Vec<u8>),
    Enum(u32),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
    /// Fields in schema order, with their names.
    Record(Vec<(String, Value)>),
    Union(u32, Box<Value>),
}

impl Value {
    /// The field `name` of a record (looking through a union's branch).
    pub fn field(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Record(fields) => fields.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            Value::Union(_, v) => v.field(name),
            _ => None,
        }
    }

    /// The value itself, or a union's branch.
    pub fn plain(&self) -> &Value {
        match self {
            Value::Union(_, v) => v.plain(),
            v => v,
        }
    }

    pub fn as_long(&self) -> Option<i64> {
        match self.plain() {
            Value::Long(v) => Some(*v),
            Value::Int(v) => Some(i64::from(*v)),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self.plain() {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Encoding

pub fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// Encodes `v` in Avro's binary encoding (arrays and maps as one block).
pub fn encode(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => {}
        Value::Boolean(b) => out.push(u8::from(*b)),
        Value::Int(i) => write_long(out, i64::from(*i)),
        Value::Long(l) => write_long(out, *l),
        Value::Float(f) => out.extend_from_slice(&f.to_le_bytes()),
        Value::Double(d) => out.extend_from_slice(&d.to_le_bytes()),
        Value::Bytes(b) => write_bytes(out, b),
        Value::String(s) => write_bytes(out, s.as_bytes()),
        Value::Fixed(b) => out.extend_from_slice(b),
        Value::Enum(i) => write_long(out, i64::from(*i)),
        Value::Array(items) => {
            if !items.is_empty() {
                write_long(out, items.len() as i64);
                for i in items {
                    encode(out, i);
                }
            }
            write_long(out, 0);
        }
        Value::Map(entries) => {
            if !entries.is_empty() {
                write_long(out, entries.len() as i64);
                for (k, v) in entries {
                    write_bytes(out, k.as_bytes());
                    encode(out, v);
                }
            }
            write_long(out, 0);
        }
        Value::Record(fields) => {
            for (_, f) in fields {
                encode(out, f);
            }
        }
        Value::Union(i, v) => {
            write_long(out, i64::from(*i));
            encode(out, v);
        }
    }
}

/// An object container file of `records` under `schema` (JSON text), with extra header
/// `metadata` (Iceberg puts the table schema, partition spec and format version there).
pub fn container_file(schema: &str, metadata: &[(&str, String)], records: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(MAGIC);
    let mut meta: Vec<(String, Value)> = vec![
        (
            "avro.schema".to_string(),
            Value::Bytes(schema.as_bytes().to_vec()),
        ),
        ("avro.codec".to_string(), Value::Bytes(b"null".to_vec())),
    ];
    for (k, v) in metadata {
        meta.push((k.to_string(), Value::Bytes(v.as_bytes().to_vec())));
    }
    encode(&mut out, &Value::Map(meta));
    let sync: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    out.extend_from_slice(&sync);
    if !records.is_empty() {
        let mut block = Vec::new();
        for r in records {
            encode(&mut block, r);
        }
        write_long(&mut out, records.len() as i64);
        write_long(&mut out, block.len() as i64);
        out.extend_from_slice(&block);
        out.extend_from_slice(&sync);
    }
    out
}

// ------------------------------------------------------------------------------------------
// Schemas (for reading)

#[derive(Debug, Clone)]
enum Schema {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(usize),
    Array(Box<Schema>),
    Map(Box<Schema>),
    Record(Vec<(String, Schema)>),
    Union(Vec<Schema>),
}

/// Parses a writer schema; named types may be referenced by (full or short) name after their
/// definition.
fn parse_schema(json: &Json) -> Result<Schema, AvroError> {
    let mut names = HashMap::new();
    parse_type(json, &mut names, 0)
}

fn parse_type(
    json: &Json,
    names: &mut HashMap<String, Schema>,
    depth: usize,
) -> Result<Schema, AvroError> {
    if depth > MAX_DEPTH {
        return Err(AvroError::Schema("nested too deeply".into()));
    }
    let bad = |what: &str| AvroError::Schema(what.to_string());
    match json {
        Json::String(name) => primitive(name)
            .or_else(|| names.get(name.as_str()).cloned())
            .ok_or_else(|| bad(&format!("unknown type '{name}'"))),
        Json::Array(branches) => Ok(Schema::Union(
            branches
                .iter()
                .map(|b| parse_type(b, names, depth + 1))
                .collect::<Result<_, _>>()?,
        )),
        Json::Object(o) => {
            let kind = o
                .get("type")
                .ok_or_else(|| bad("a type without \"type\""))?;
            let kind = match kind {
                Json::String(s) => s.as_str(),
                // {"type": {...}}: a nested definition.
                other => return parse_type(other, names, depth + 1),
            };
            let schema = match kind {
                "record" | "error" => {
                    let fields = o
                        .get("fields")
                        .and_then(Json::as_array)
                        .ok_or_else(|| bad("a record without fields"))?;
                    let mut parsed = Vec::with_capacity(fields.len());
                    for f in fields {
                        let name = f
                            .get("name")
                            .and_then(Json::as_str)
                            .ok_or_else(|| bad("a field without a name"))?;
                        let t = f.get("type").ok_or_else(|| bad("a field without a type"))?;
                        parsed.push((name.to_string(), parse_type(t, names, depth + 1)?));
                    }
                    Schema::Record(parsed)
                }
                "enum" => Schema::Enum(
                    o.get("symbols")
                        .and_then(Json::as_array)
                        .map_or(0, Vec::len),
                ),
                "fixed" => Schema::Fixed(
                    o.get("size")
                        .and_then(Json::as_u64)
                        .filter(|&s| s <= 1 << 20)
                        .ok_or_else(|| bad("a fixed without a valid size"))?
                        as usize,
                ),
                "array" => Schema::Array(Box::new(parse_type(
                    o.get("items")
                        .ok_or_else(|| bad("an array without items"))?,
                    names,
                    depth + 1,
                )?)),
                "map" => Schema::Map(Box::new(parse_type(
                    o.get("values").ok_or_else(|| bad("a map without values"))?,
                    names,
                    depth + 1,
                )?)),
                p => primitive(p)
                    .or_else(|| names.get(p).cloned())
                    .ok_or_else(|| bad(&format!("unknown type '{p}'")))?,
            };
            if let Some(name) = o.get("name").and_then(Json::as_str) {
                if matches!(kind, "record" | "error" | "enum" | "fixed") {
                    let short = name.rsplit('.').next().unwrap_or(name).to_string();
                    if let Some(ns) = o.get("namespace").and_then(Json::as_str) {
                        names.insert(format!("{ns}.{short}"), schema.clone());
                    }
                    names.insert(name.to_string(), schema.clone());
                    names.insert(short, schema.clone());
                }
            }
            Ok(schema)
        }
        _ => Err(bad("not a type")),
    }
}

fn primitive(name: &str) -> Option<Schema> {
    Some(match name {
        "null" => Schema::Null,
        "boolean" => Schema::Boolean,
        "int" => Schema::Int,
        "long" => Schema::Long,
        "float" => Schema::Float,
        "double" => Schema::Double,
        "bytes" => Schema::Bytes,
        "string" => Schema::String,
        _ => return None,
    })
}

// ------------------------------------------------------------------------------------------
// Decoding

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn long(&mut self) -> Result<i64, AvroError> {
        let mut z: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or(AvroError::Truncated)?;
            self.buf = rest;
            z |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(AvroError::Invalid("varint longer than 10 bytes".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], AvroError> {
        if n > self.buf.len() {
            return Err(AvroError::Truncated);
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    /// A length prefix that the bytes left can back.
    fn len(&mut self) -> Result<usize, AvroError> {
        let n = self.long()?;
        if n < 0 || n as u64 > self.buf.len() as u64 {
            return Err(AvroError::Invalid(format!("length {n} past the data")));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], AvroError> {
        let n = self.len()?;
        self.take(n)
    }

    /// A block count of an array or map; negative counts are followed by the block's size.
    /// Every item takes at least one byte, so a count past the bytes left is refused.
    fn block_count(&mut self) -> Result<usize, AvroError> {
        let mut n = self.long()?;
        if n < 0 {
            n = n
                .checked_neg()
                .ok_or(AvroError::Invalid("block count".into()))?;
            self.long()?;
        }
        if n as u64 > self.buf.len() as u64 {
            return Err(AvroError::Invalid(format!(
                "block of {n} items past the data"
            )));
        }
        Ok(n as usize)
    }

    fn value(&mut self, s: &Schema, depth: usize) -> Result<Value, AvroError> {
        if depth > MAX_DEPTH {
            return Err(AvroError::Invalid("nested too deeply".into()));
        }
        Ok(match s {
            Schema::Null => Value::Null,
            Schema::Boolean => Value::Boolean(self.take(1)?[0] != 0),
            Schema::Int => Value::Int(
                i32::try_from(self.long()?)
                    .map_err(|_| AvroError::Invalid("int out of range".into()))?,
            ),
            Schema::Long => Value::Long(self.long()?),
            Schema::Float => {
                let b = self.take(4)?;
                Value::Float(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            Schema::Double => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::Double(f64::from_le_bytes(a))
            }
            Schema::Bytes => Value::Bytes(self.bytes()?.to_vec()),
            Schema::String => Value::String(
                std::str::from_utf8(self.bytes()?)
                    .map_err(|_| AvroError::Invalid("string is not UTF-8".into()))?
                    .to_string(),
            ),
            Schema::Fixed(n) => Value::Fixed(self.take(*n)?.to_vec()),
            Schema::Enum(n) => {
                let i = self.long()?;
                if i < 0 || i as u64 >= *n as u64 {
                    return Err(AvroError::Invalid(format!("enum index {i}")));
                }
                Value::Enum(i as u32)
            }
            Schema::Array(items) => {
                let mut out = Vec::new();
                loop {
                    let n = self.block_count()?;
                    if n == 0 {
                        break;
                    }
                    out.reserve(n);
                    for _ in 0..n {
                        out.push(self.value(items, depth + 1)?);
                    }
                }
                Value::Array(out)
            }
            Schema::Map(values) => {
                let mut out = Vec::new();
                loop {
                    let n = self.block_count()?;
                    if n == 0 {
                        break;
                    }
                    out.reserve(n);
                    for _ in 0..n {
                        let k = std::str::from_utf8(self.bytes()?)
                            .map_err(|_| AvroError::Invalid("map key is not UTF-8".into()))?
                            .to_string();
                        out.push((k, self.value(values, depth + 1)?));
                    }
                }
                Value::Map(out)
            }
            Schema::Record(fields) => {
                let mut out = Vec::with_capacity(fields.len());
                for (name, f) in fields {
                    out.push((name.clone(), self.value(f, depth + 1)?));
                }
                Value::Record(out)
            }
            Schema::Union(branches) => {
                let i = self.long()?;
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| AvroError::Invalid(format!("union branch {i}")))?;
                Value::Union(i as u32, Box::new(self.value(b, depth + 1)?))
            }
        })
    }
}

/// A container file read back: its header metadata and its records.
#[derive(Debug)]
pub struct ContainerFile {
    pub metadata: Vec<(String, Vec<u8>)>,
    pub records: Vec<Value>,
}

/// Reads an object container file (codec `null` only).
pub fn read_container_file(data: &[u8]) -> Result<ContainerFile, AvroError> {
    if data.len() < MAGIC.len() || &data[..4] != MAGIC {
        return Err(AvroError::NotAvro);
    }
    let mut r = Reader { buf: &data[4..] };
    let header = r.value(&Schema::Map(Box::new(Schema::Bytes)), 0)?;
    let Value::Map(entries) = header else {
        return Err(AvroError::NotAvro);
    };
    let metadata: Vec<(String, Vec<u8>)> = entries
        .into_iter()
        .map(|(k, v)| match v {
            Value::Bytes(b) => (k, b),
            _ => (k, Vec::new()),
        })
        .collect();
    let meta = |key: &str| metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let codec = meta("avro.codec").map_or("null".to_string(), |c| {
        String::from_utf8_lossy(c).to_string()
    });
    let deflate = match codec.as_str() {
        "null" => false,
        "deflate" => true,
        _ => return Err(AvroError::Codec(codec)),
    };
    let schema_json: Json = serde_json::from_slice(
        meta("avro.schema").ok_or_else(|| AvroError::Schema("no avro.schema".into()))?,
    )
    .map_err(|e| AvroError::Schema(e.to_string()))?;
    let schema = parse_schema(&schema_json)?;
    let sync = r.take(16)?.to_vec();
    let mut records = Vec::new();
    while !r.buf.is_empty() {
        let count = r.long()?;
        let size = r.len()?;
        let raw = r.take(size)?;
        let inflated;
        let mut block = if deflate {
            inflated = inflate(raw)?;
            Reader { buf: &inflated }
        } else {
            Reader { buf: raw }
        };
        if count < 0 || count as u64 > block.buf.len() as u64 + 1 {
            return Err(AvroError::Invalid(format!("block of {count} records")));
        }
        for _ in 0..count {
            records.push(block.value(&schema, 0)?);
        }
        if r.take(16)? != sync.as_slice() {
            return Err(AvroError::Invalid("sync marker mismatch".into()));
        }
    }
    Ok(ContainerFile { metadata, records })
}

/// The most one deflated block may inflate to: Iceberg metadata blocks are small.
const MAX_INFLATED_BLOCK: u64 = 64 << 20;

fn inflate(raw: &[u8]) -> Result<Vec<u8>, AvroError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(raw)
        .take(MAX_INFLATED_BLOCK + 1)
        .read_to_end(&mut out)
        .map_err(|e| AvroError::Invalid(format!("deflate: {e}")))?;
    if out.len() as u64 > MAX_INFLATED_BLOCK {
        return Err(AvroError::Invalid("a block inflates past 64 MiB".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
        {"name":"a","type":"long"},
        {"name":"b","type":["null","string"]},
        {"name":"c","type":{"type":"array","items":{"type":"record","name":"e","fields":[
            {"name":"x","type":"int"},{"name":"y","type":["null","bytes"]}]}}},
        {"name":"d","type":["null",{"type":"map","values":"long"}]},
        {"name":"f","type":"e"},
        {"name":"g","type":"boolean"}]}"#;

    fn record(i: i64) -> Value {
        let e = |x: i32| {
            Value::Record(vec![
                ("x".into(), Value::Int(x)),
                (
                    "y".into(),
                    Value::Union(1, Box::new(Value::Bytes(vec![x as u8; 3]))),
                ),
            ])
        };
        Value::Record(vec![
            ("a".into(), Value::Long(i * -1_000_000_007)),
            (
                "b".into(),
                Value::Union(1, Box::new(Value::String(format!("s{i}")))),
            ),
            ("c".into(), Value::Array((0..i as i32).map(e).collect())),
            (
                "d".into(),
                Value::Union(1, Box::new(Value::Map(vec![("k".into(), Value::Long(i))]))),
            ),
            ("f".into(), e(-7)),
            ("g".into(), Value::Boolean(i % 2 == 0)),
        ])
    }

    #[test]
    fn a_container_file_reads_back_what_was_written_with_its_metadata() {
        let records: Vec<Value> = (0..5).map(record).collect();
        let file = container_file(SCHEMA, &[("format-version", "2".into())], &records);
        let back = read_container_file(&file).unwrap();
        assert_eq!(back.records, records);
        assert!(back
            .metadata
            .iter()
            .any(|(k, v)| k == "format-version" && v == b"2"));
        assert_eq!(
            back.records[3].field("a").unwrap().as_long(),
            Some(-3_000_000_021)
        );
        assert_eq!(back.records[2].field("b").unwrap().as_str(), Some("s2"));
    }

    #[test]
    fn longs_round_trip_at_their_extremes() {
        for v in [0, 1, -1, 63, -64, 64, i64::MAX, i64::MIN, i32::MAX as i64] {
            let mut b = Vec::new();
            write_long(&mut b, v);
            assert_eq!(Reader { buf: &b }.long().unwrap(), v);
        }
    }

    #[test]
    fn every_truncation_or_corruption_is_an_error_not_a_panic() {
        let file = container_file(SCHEMA, &[], &(0..4).map(record).collect::<Vec<_>>());
        // Cut right after the header, the file is whole and empty.
        let empty = container_file(SCHEMA, &[], &[]).len();
        for cut in (0..file.len()).filter(|&c| c != empty) {
            assert!(read_container_file(&file[..cut]).is_err(), "cut at {cut}");
        }
        assert!(read_container_file(&file[..empty])
            .unwrap()
            .records
            .is_empty());
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0xff;
            let _ = read_container_file(&bad);
        }
    }

    #[test]
    fn a_block_count_the_bytes_cannot_back_is_refused_before_allocating() {
        let mut b = Vec::new();
        write_long(&mut b, i64::MAX / 2);
        let r = Reader { buf: &b }.value(&Schema::Array(Box::new(Schema::Null)), 0);
        assert!(matches!(r, Err(AvroError::Invalid(_))));
    }
}
