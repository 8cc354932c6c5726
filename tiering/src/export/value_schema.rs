//! Typed columns decoded from JSON record values, per a declared schema (`--value-schema`).
//!
//! The schema file names top-level fields of a JSON object value and their types:
//!
//! ```json
//! {"fields": [{"name": "id", "type": "long"},
//!             {"name": "amount", "type": "double"},
//!             {"name": "ts", "type": "timestamp_ms"},
//!             {"name": "tags", "type": "string", "nullable": true}]}
//! ```
//!
//! Each field becomes one nullable top-level column `value_<name>` after the fixed columns
//! (flat columns, not a struct: every bulk loader maps them to table columns and readers prune
//! on their statistics); the raw `value` column is kept. Types: `long` (Int64), `int` /
//! `integer` (Int32), `double` (Float64), `string` (Utf8), `boolean`, `timestamp_ms`
//! (TIMESTAMP millis UTC). Spark's `df.schema.json()` output is accepted as well (its
//! `"type": "struct"` and `"metadata"` keys are ignored), for the types above.
//!
//! Decoding is strict and never drops a record: a value that is not a JSON object gets nulls
//! in every typed column and counts as *not JSON*; a field whose JSON value does not fit its
//! type (or a missing/`null` field not declared `"nullable": true`) gets a null in that column
//! and the record counts as *mismatched*. A null value (tombstone) gets nulls and counts as
//! neither. Pure code: bytes in, Arrow arrays out.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::ArrayRef;
use arrow_schema::{DataType, Field, TimeUnit};
use serde_json::Value;

/// Prefix of the typed columns' names.
pub const COLUMN_PREFIX: &str = "value_";

#[derive(Debug, thiserror::Error)]
pub enum ValueSchemaError {
    #[error("value schema is not valid JSON of the form {{\"fields\": [{{\"name\": .., \"type\": ..}}]}}: {0}")]
    Syntax(#[from] serde_json::Error),
    #[error("value schema declares no fields")]
    Empty,
    #[error("value schema field '{name}': unknown type '{ty}' (use long, int, double, string, boolean or timestamp_ms)")]
    UnknownType { name: String, ty: String },
    #[error("value schema field name '{0}' is empty or contains one of ' ,;{{}}()=' or a control character")]
    BadName(String),
    #[error("value schema declares field '{0}' twice")]
    Duplicate(String),
}

/// The type of one typed column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Long,
    Int,
    Double,
    String,
    Boolean,
    TimestampMs,
}

impl FieldType {
    fn parse(name: &str, ty: &str) -> Result<FieldType, ValueSchemaError> {
        Ok(match ty {
            "long" | "bigint" => FieldType::Long,
            "int" | "integer" => FieldType::Int,
            "double" => FieldType::Double,
            "string" => FieldType::String,
            "boolean" => FieldType::Boolean,
            "timestamp_ms" => FieldType::TimestampMs,
            _ => {
                return Err(ValueSchemaError::UnknownType {
                    name: name.to_string(),
                    ty: ty.to_string(),
                })
            }
        })
    }

    pub fn data_type(self) -> DataType {
        match self {
            FieldType::Long => DataType::Int64,
            FieldType::Int => DataType::Int32,
            FieldType::Double => DataType::Float64,
            FieldType::String => DataType::Utf8,
            FieldType::Boolean => DataType::Boolean,
            FieldType::TimestampMs => {
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
            }
        }
    }
}

/// One declared field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueField {
    pub name: String,
    pub ty: FieldType,
    /// A missing or `null` field is expected (otherwise the record counts as mismatched).
    pub nullable: bool,
}

impl ValueField {
    pub fn column_name(&self) -> String {
        format!("{COLUMN_PREFIX}{}", self.name)
    }
}

/// A validated value schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueSchema {
    pub fields: Vec<ValueField>,
}

#[derive(serde::Deserialize)]
struct FileModel {
    fields: Vec<FieldModel>,
}

#[derive(serde::Deserialize)]
struct FieldModel {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    nullable: bool,
}

impl ValueSchema {
    /// Parses and validates a schema file's contents.
    pub fn from_json(raw: &[u8]) -> Result<ValueSchema, ValueSchemaError> {
        let model: FileModel = serde_json::from_slice(raw)?;
        if model.fields.is_empty() {
            return Err(ValueSchemaError::Empty);
        }
        let mut fields: Vec<ValueField> = Vec::with_capacity(model.fields.len());
        for f in model.fields {
            if f.name.is_empty()
                || f.name
                    .chars()
                    .any(|c| c.is_control() || " ,;{}()=".contains(c))
            {
                return Err(ValueSchemaError::BadName(f.name));
            }
            if fields.iter().any(|g| g.name == f.name) {
                return Err(ValueSchemaError::Duplicate(f.name));
            }
            let ty = FieldType::parse(&f.name, &f.ty)?;
            fields.push(ValueField {
                name: f.name,
                ty,
                nullable: f.nullable,
            });
        }
        Ok(ValueSchema { fields })
    }

    /// The typed columns' Arrow fields (always nullable: mismatches are nulls).
    pub fn arrow_fields(&self) -> Vec<Field> {
        self.fields
            .iter()
            .map(|f| Field::new(f.column_name(), f.ty.data_type(), true))
            .collect()
    }
}

/// How one record's value decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field present with its type (or absent/null and nullable).
    Typed,
    /// A null value: nulls, not counted.
    Null,
    /// Not a JSON object: nulls in every typed column.
    NotJson,
    /// A JSON object with at least one field of the wrong type or missing.
    Mismatched,
}

enum Builder {
    Long(Int64Builder),
    Int(Int32Builder),
    Double(Float64Builder),
    String(StringBuilder),
    Boolean(BooleanBuilder),
    TimestampMs(TimestampMillisecondBuilder),
}

impl Builder {
    fn new(ty: FieldType) -> Builder {
        match ty {
            FieldType::Long => Builder::Long(Int64Builder::new()),
            FieldType::Int => Builder::Int(Int32Builder::new()),
            FieldType::Double => Builder::Double(Float64Builder::new()),
            FieldType::String => Builder::String(StringBuilder::new()),
            FieldType::Boolean => Builder::Boolean(BooleanBuilder::new()),
            FieldType::TimestampMs => {
                Builder::TimestampMs(TimestampMillisecondBuilder::new().with_timezone("UTC"))
            }
        }
    }

    fn append_null(&mut self) {
        match self {
            Builder::Long(b) => b.append_null(),
            Builder::Int(b) => b.append_null(),
            Builder::Double(b) => b.append_null(),
            Builder::String(b) => b.append_null(),
            Builder::Boolean(b) => b.append_null(),
            Builder::TimestampMs(b) => b.append_null(),
        }
    }

    /// Appends `v` converted to the column's type; false (and a null) when it does not fit.
    /// Adds the bytes buffered to `bytes`.
    fn append(&mut self, v: &Value, bytes: &mut usize) -> bool {
        match (&mut *self, v) {
            (Builder::Long(b), Value::Number(n)) => put(b, n.as_i64()),
            (Builder::Int(b), Value::Number(n)) => {
                put(b, n.as_i64().and_then(|x| i32::try_from(x).ok()))
            }
            (Builder::Double(b), Value::Number(n)) => put(b, n.as_f64()),
            (Builder::String(b), Value::String(s)) => {
                *bytes += s.len();
                b.append_value(s);
                true
            }
            // Nested objects and arrays are kept as their JSON text, to be parsed later.
            (Builder::String(b), v @ (Value::Array(_) | Value::Object(_))) => {
                let text = v.to_string();
                *bytes += text.len();
                b.append_value(text);
                true
            }
            (Builder::Boolean(b), Value::Bool(x)) => {
                b.append_value(*x);
                true
            }
            (Builder::TimestampMs(b), Value::Number(n)) => put(b, n.as_i64()),
            (Builder::TimestampMs(b), Value::String(s)) => put(
                b,
                chrono::DateTime::parse_from_rfc3339(s)
                    .ok()
                    .map(|d| d.timestamp_millis()),
            ),
            (b, _) => {
                b.append_null();
                false
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Long(b) => Arc::new(b.finish()),
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Double(b) => Arc::new(b.finish()),
            Builder::String(b) => Arc::new(b.finish()),
            Builder::Boolean(b) => Arc::new(b.finish()),
            Builder::TimestampMs(b) => Arc::new(b.finish()),
        }
    }
}

/// Appends `v`, or a null when the JSON value did not convert; true when it did.
fn put<T: arrow_array::ArrowPrimitiveType>(
    b: &mut arrow_array::builder::PrimitiveBuilder<T>,
    v: Option<T::Native>,
) -> bool {
    b.append_option(v);
    v.is_some()
}

/// Arrow builders for the typed columns of one batch of rows.
pub struct ValueColumns {
    schema: Arc<ValueSchema>,
    builders: Vec<Builder>,
}

impl ValueColumns {
    pub fn new(schema: Arc<ValueSchema>) -> ValueColumns {
        let builders = schema.fields.iter().map(|f| Builder::new(f.ty)).collect();
        ValueColumns { schema, builders }
    }

    /// Decodes one record's value into one entry per typed column; adds the bytes buffered to
    /// `bytes`.
    pub fn append(&mut self, value: Option<&[u8]>, bytes: &mut usize) -> Decoded {
        let Some(raw) = value else {
            self.builders.iter_mut().for_each(Builder::append_null);
            return Decoded::Null;
        };
        let object = match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            _ => {
                self.builders.iter_mut().for_each(Builder::append_null);
                return Decoded::NotJson;
            }
        };
        let mut result = Decoded::Typed;
        for (field, builder) in self.schema.fields.iter().zip(&mut self.builders) {
            let fits = match object.get(&field.name) {
                None | Some(Value::Null) => {
                    builder.append_null();
                    field.nullable
                }
                Some(v) => builder.append(v, bytes),
            };
            if !fits {
                result = Decoded::Mismatched;
            }
        }
        result
    }

    /// The typed columns of the rows appended so far; the builders start over.
    pub fn finish(&mut self) -> Vec<ArrayRef> {
        self.builders.iter_mut().map(Builder::finish).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
    use arrow_array::Array;

    fn schema() -> Arc<ValueSchema> {
        Arc::new(
            ValueSchema::from_json(
                br#"{"fields":[{"name":"id","type":"long"},{"name":"n","type":"int"},
                {"name":"amount","type":"double"},{"name":"ts","type":"timestamp_ms"},
                {"name":"ok","type":"boolean","nullable":true},
                {"name":"tags","type":"string","nullable":true}]}"#,
            )
            .unwrap(),
        )
    }

    #[test]
    fn schema_files_are_validated() {
        let s = schema();
        assert_eq!(s.fields.len(), 6);
        assert_eq!(s.fields[0].column_name(), "value_id");
        assert!(!s.fields[0].nullable && s.fields[5].nullable);
        for (bad, what) in [
            (&br#"{"fields":[]}"#[..], "no fields"),
            (
                br#"{"fields":[{"name":"a","type":"decimal"}]}"#,
                "unknown type",
            ),
            (br#"{"fields":[{"name":"a b","type":"long"}]}"#, "bad name"),
            (br#"{"fields":[{"name":"","type":"long"}]}"#, "empty name"),
            (
                br#"{"fields":[{"name":"a","type":"long"},{"name":"a","type":"int"}]}"#,
                "dup",
            ),
            (br#"{"fields":[{"name":"a"}]}"#, "no type"),
            (b"not json", "syntax"),
        ] {
            assert!(ValueSchema::from_json(bad).is_err(), "{what} accepted");
        }
        // Spark's StructType JSON (df.schema.json()) reads too.
        let spark = ValueSchema::from_json(
            br#"{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},
            {"name":"c","type":"integer","nullable":false,"metadata":{}}]}"#,
        )
        .unwrap();
        assert_eq!(spark.fields[1].ty, FieldType::Int);
        assert!(spark.fields[0].nullable && !spark.fields[1].nullable);
    }

    #[test]
    fn values_decode_to_typed_columns_and_mismatches_become_nulls() {
        let mut c = ValueColumns::new(schema());
        let mut bytes = 0;
        let values: [(Option<&[u8]>, Decoded); 9] = [
            (
                Some(br#"{"id":1,"n":2,"amount":2.5,"ts":1700000000000,"ok":true,"tags":"a"}"#),
                Decoded::Typed,
            ),
            // Integers are doubles; an RFC 3339 time is a timestamp; nested JSON is kept as text.
            (
                Some(br#"{"id":-9,"n":-1,"amount":3,"ts":"2023-11-14T22:13:20.5Z","tags":["x",{"y":1}]}"#),
                Decoded::Typed,
            ),
            (Some(b"not json"), Decoded::NotJson),
            (Some(b"[1,2]"), Decoded::NotJson),
            (None, Decoded::Null),
            // Wrong types: a float for long, out of i32 range for int, a string for double.
            (
                Some(br#"{"id":1.5,"n":3000000000,"amount":"x","ts":5,"ok":false}"#),
                Decoded::Mismatched,
            ),
            // A required field missing; a nullable one null.
            (Some(br#"{"n":1,"amount":1,"ts":1,"tags":null}"#), Decoded::Mismatched),
            (Some(br#"{"id":1,"n":1,"amount":1,"ts":"yesterday"}"#), Decoded::Mismatched),
            (Some(br#"{"id":1,"n":1,"amount":1,"ts":1,"ok":"yes"}"#), Decoded::Mismatched),
        ];
        for (v, want) in values {
            assert_eq!(
                c.append(v, &mut bytes),
                want,
                "{:?}",
                v.map(String::from_utf8_lossy)
            );
        }
        let cols = c.finish();
        assert!(cols.iter().all(|a| a.len() == 9));
        let id = cols[0].as_primitive::<Int64Type>();
        let n = cols[1].as_primitive::<Int32Type>();
        let amount = cols[2].as_primitive::<Float64Type>();
        let ts = cols[3].as_primitive::<TimestampMillisecondType>();
        let ok = cols[4].as_boolean();
        let tags = cols[5].as_string::<i32>();
        assert_eq!((id.value(0), n.value(0), amount.value(0)), (1, 2, 2.5));
        assert_eq!(
            (ts.value(0), ok.value(0), tags.value(0)),
            (1700000000000, true, "a")
        );
        assert_eq!((id.value(1), n.value(1), amount.value(1)), (-9, -1, 3.0));
        assert_eq!(ts.value(1), 1700000000500);
        assert!(ok.is_null(1));
        assert_eq!(tags.value(1), r#"["x",{"y":1}]"#);
        for row in 2..5 {
            assert!(cols.iter().all(|a| a.is_null(row)), "row {row}");
        }
        assert!(id.is_null(5) && n.is_null(5) && amount.is_null(5));
        assert_eq!((ts.value(5), ok.value(5)), (5, false));
        assert!(id.is_null(6) && tags.is_null(6) && n.value(6) == 1);
        assert!(ts.is_null(7) && id.value(7) == 1);
        assert!(ok.is_null(8));
        assert!(bytes > 0);
        // The builders start over.
        assert!(c.finish().iter().all(|a| a.is_empty()));
    }
}
