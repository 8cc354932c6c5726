//! Iceberg table tests: a local partition exported with Iceberg columns, committed, and the
//! table's metadata, manifest list and manifests read back (with this module's Avro reader;
//! the interop suite reads the same tables with pyiceberg and DuckDB).

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::super::tests::{local_plan, run_export, simple, spec, write_segment};
use super::super::*;
use super::*;
use serde_json::json;

const DAY_MS: i64 = 86_400_000;
/// 2023-11-14T00:00:00Z.
const MIDNIGHT: i64 = 1_699_920_000_000;

/// Batches of 10 records, 1 ms apart, starting 5 ms before a midnight: each batch's records
/// fall on two days.
fn batches_across_midnight(base: i64, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut s = spec(base + 10 * i as i64, 0);
            s.base_ts = MIDNIGHT + DAY_MS * i as i64 - 5;
            simple(s, 10)
        })
        .collect()
}

fn options() -> ExportOptions {
    let mut o = ExportOptions::default();
    o.convert.iceberg = Some(Arc::new(IcebergColumns::default()));
    o
}

fn dir_target(out: &Path) -> Arc<Target> {
    Arc::new(Target::open(out.to_str().unwrap(), &Default::default()).unwrap())
}

/// Every data file of the current snapshot: (path, record count, partition, day).
fn table_files(out: &Path) -> Vec<(String, i64, i32, i32)> {
    let meta = out.join("topic=t/metadata");
    let hint = std::fs::read_to_string(meta.join("version-hint.text")).unwrap();
    let m: Json = serde_json::from_slice(
        &std::fs::read(meta.join(format!("v{hint}.metadata.json"))).unwrap(),
    )
    .unwrap();
    let current = m["current-snapshot-id"].as_i64().unwrap();
    let snap = m["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(current))
        .unwrap();
    let list =
        avro::read_container_file(&std::fs::read(snap["manifest-list"].as_str().unwrap()).unwrap())
            .unwrap();
    let mut files = Vec::new();
    for mf in &list.records {
        let manifest = avro::read_container_file(
            &std::fs::read(mf.field("manifest_path").unwrap().as_str().unwrap()).unwrap(),
        )
        .unwrap();
        for e in &manifest.records {
            let df = e.field("data_file").unwrap();
            let part = df.field("partition").unwrap();
            files.push((
                df.field("file_path").unwrap().as_str().unwrap().to_string(),
                df.field("record_count").unwrap().as_long().unwrap(),
                part.field("partition").unwrap().as_long().unwrap() as i32,
                part.field("timestamp_day").unwrap().as_long().unwrap() as i32,
            ));
        }
    }
    files.sort();
    files
}

/// (offset, timestamp in microseconds) of every row of a Parquet file.
fn rows(path: &str) -> Vec<(i64, i64)> {
    let bytes = Bytes::from(std::fs::read(path).unwrap());
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let o = b.column(2).as_primitive::<Int64Type>();
        let t = b.column(3).as_primitive::<TimestampMicrosecondType>();
        out.extend((0..b.num_rows()).map(|i| (o.value(i), t.value(i))));
    }
    out
}

#[tokio::test]
async fn files_hold_one_day_each_and_every_record_is_in_the_table_once_across_crashes() {
    let log = tempfile::tempdir().unwrap();
    write_segment(log.path(), 0, &batches_across_midnight(0, 3));
    write_segment(log.path(), 30, &batches_across_midnight(30, 2));
    write_segment(log.path(), 50, &[]);
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    let plan = local_plan(log.path()).await;
    let s = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(s.records, 50);
    // Two segments, each of whose records span several days: one file per day per segment.
    let c = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!((c.records, c.version), (50, 2));
    let files = table_files(out.path());
    assert_eq!(files.len(), c.files);
    let mut offsets = Vec::new();
    for (path, count, partition, day) in &files {
        assert_eq!(*partition, 0);
        let r = rows(path);
        assert_eq!(r.len() as i64, *count);
        for (offset, ts_us) in r {
            assert_eq!(ts_us.div_euclid(MICROS_PER_DAY) as i32, *day, "{path}");
            offsets.push(offset);
        }
    }
    offsets.sort();
    assert_eq!(offsets, (0..50).collect::<Vec<_>>());

    // A second commit finds nothing new.
    let again = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!((again.files, again.version), (0, 2));

    // A crash after the second segment's files landed but before the checkpoint moved: the
    // re-run writes them again, identically, and the table still holds each record once.
    target
        .write_checkpoint("t", 0, Checkpoint::new("t", 0, 30, None, Some(50)), None)
        .await
        .unwrap();
    run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    let after = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!(after.files, 0);
    assert_eq!(table_files(out.path()), files);

    // New records: exported, then a crash before the table commit; the next commit adds them.
    std::fs::remove_file(log.path().join(format!("{:020}.log", 50))).unwrap();
    write_segment(log.path(), 50, &batches_across_midnight(50, 1));
    write_segment(log.path(), 60, &[]);
    let plan = local_plan(log.path()).await;
    let s = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(s.records, 10);
    let c = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!((c.records, c.version), (10, 3));
    let all = table_files(out.path());
    assert_eq!(all.iter().map(|f| f.1).sum::<i64>(), 60);
    let table = load(&target, "t").await.unwrap().unwrap();
    assert_eq!(table.next_offsets().unwrap().get(&0), Some(&60));
    assert_eq!(table.summary_i64("total-records"), 60);
    assert_eq!(
        table.metadata["snapshots"].as_array().unwrap().len(),
        2,
        "one snapshot per commit that added files"
    );
}

#[tokio::test]
async fn a_commit_that_loses_the_race_for_its_version_retries_on_the_winner() {
    let log = tempfile::tempdir().unwrap();
    write_segment(log.path(), 0, &batches_across_midnight(0, 2));
    write_segment(log.path(), 20, &[]);
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    let table = create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    run_export(
        &local_plan(log.path()).await,
        &target,
        ExportRange::default(),
        &options,
    )
    .await
    .unwrap();
    // Another committer takes version 2 first (here: a copy of version 1).
    assert!(target
        .create_object(
            "t",
            "topic=t/metadata/v2.metadata.json",
            Bytes::from(serde_json::to_vec(&table.metadata).unwrap()),
        )
        .await
        .unwrap());
    let c = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!((c.version, c.records), (3, 20));
    // Creating an existing version is refused, not overwritten.
    assert!(!target
        .create_object(
            "t",
            "topic=t/metadata/v3.metadata.json",
            Bytes::from_static(b"{}")
        )
        .await
        .unwrap());
}

#[tokio::test]
async fn a_value_schema_that_gains_a_field_adds_a_column_and_keeps_the_ids() {
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let schema = |json: &str| -> ConvertOptions {
        ConvertOptions {
            value_schema: Some(Arc::new(ValueSchema::from_json(json.as_bytes()).unwrap())),
            ..Default::default()
        }
    };
    let mut first =
        schema(r#"{"fields":[{"name":"id","type":"long"},{"name":"at","type":"timestamp_ms"}]}"#);
    first.iceberg = Some(Arc::new(columns(&first, None).unwrap()));
    assert_eq!(first.iceberg.as_ref().unwrap().value_ids, vec![13, 14]);
    let table = create_if_absent(&target, "t", &first).await.unwrap();
    let fields = table.current_schema().unwrap()["fields"].clone();
    assert_eq!(fields[10]["name"], "value_at");
    assert_eq!(fields[10]["id"], 14);
    assert_eq!(fields[10]["type"], "timestamptz");
    assert_eq!(fields[7]["type"]["element-id"], 10);

    let mut second = schema(
        r#"{"fields":[{"name":"name","type":"string"},{"name":"id","type":"long"},{"name":"at","type":"timestamp_ms"}]}"#,
    );
    second.iceberg = Some(Arc::new(columns(&second, Some(&table)).unwrap()));
    assert_eq!(second.iceberg.as_ref().unwrap().value_ids, vec![15, 13, 14]);
    let mut metadata = table.metadata.clone();
    let id = evolve_schema(&mut metadata, &second).unwrap();
    assert_eq!(id, 1);
    assert_eq!(metadata["last-column-id"], 15);
    assert_eq!(metadata["schemas"].as_array().unwrap().len(), 2);
    // The same schema again changes nothing.
    let again = evolve_schema(&mut metadata, &second).unwrap();
    assert_eq!(again, 1);

    let changed = schema(r#"{"fields":[{"name":"id","type":"string"}]}"#);
    let err = columns(&changed, Some(&table)).unwrap_err().to_string();
    assert!(
        err.contains("value_id") && err.contains("new table"),
        "{err}"
    );
}

#[tokio::test]
async fn files_of_a_plain_export_are_refused_by_the_commit() {
    let log = tempfile::tempdir().unwrap();
    write_segment(log.path(), 0, &batches_across_midnight(0, 1));
    write_segment(log.path(), 10, &[]);
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    run_export(
        &local_plan(log.path()).await,
        &target,
        ExportRange::default(),
        &ExportOptions::default(),
    )
    .await
    .unwrap();
    let err = commit(&target, "t", &[0], &options().convert)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("field id"), "{err}");
}

/// Commit `i` of a table committed once per new segment: writes segment `i` (2 records, on
/// one day) and an empty active one after it into `log`, exports and commits it.
async fn export_and_commit_segment(
    log: &Path,
    target: &Arc<Target>,
    options: &ExportOptions,
    i: i64,
) {
    let _ = std::fs::remove_file(log.join(format!("{:020}.log", 2 * i)));
    let mut s = spec(2 * i, 0);
    s.base_ts = MIDNIGHT + 1000 * i;
    write_segment(log, 2 * i, &[simple(s, 2)]);
    write_segment(log, 2 * i + 2, &[]);
    let plan = local_plan(log).await;
    run_export(&plan, target, ExportRange::default(), options)
        .await
        .unwrap();
    let c = commit(target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!(c.records, 2, "commit {i}");
}

#[tokio::test]
async fn a_table_committed_often_keeps_few_manifests_and_every_file_once() {
    let log = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    let commits = maintenance::MIN_COUNT_TO_MERGE + 5;
    for i in 0..commits as i64 {
        export_and_commit_segment(log.path(), &target, &options, i).await;
    }
    let files = table_files(out.path());
    assert_eq!(files.len(), commits);
    assert_eq!(files.iter().map(|f| f.1).sum::<i64>(), 2 * commits as i64);
    let mut paths: Vec<&String> = files.iter().map(|f| &f.0).collect();
    paths.dedup();
    assert_eq!(paths.len(), commits);
    // The manifests were merged once there were MIN_COUNT_TO_MERGE of them.
    let table = load(&target, "t").await.unwrap().unwrap();
    let list = table.current_snapshot().unwrap()["manifest-list"]
        .as_str()
        .unwrap()
        .to_string();
    let manifests = decode_manifest_list(&std::fs::read(&list).unwrap()).unwrap();
    assert!(manifests.len() <= 6, "{} manifests", manifests.len());
    let merged = manifests
        .iter()
        .find(|m| m.field("existing_files_count").and_then(Value::as_long) == Some(100))
        .expect("a merged manifest of the first 100 files");
    assert_eq!(
        merged.field("existing_rows_count").unwrap().as_long(),
        Some(200)
    );
    assert!(table.metadata["metadata-log"].as_array().unwrap().len() <= 100);
}

#[test]
fn expiry_keeps_young_newest_and_current_snapshots_and_trims_the_metadata_log() {
    let now = 10 * DAY_MS;
    let snapshot = |id: i64, age_days: i64| {
        json!({"snapshot-id": id, "timestamp-ms": now - age_days * DAY_MS,
               "manifest-list": format!("/t/metadata/snap-{id}.avro")})
    };
    let mut metadata = json!({
        "current-snapshot-id": 5,
        "snapshots": [snapshot(1, 9), snapshot(2, 7), snapshot(3, 6), snapshot(4, 1), snapshot(5, 0)],
        "snapshot-log": (1..=5).map(|id| json!({"snapshot-id": id, "timestamp-ms": 0})).collect::<Vec<_>>(),
        "metadata-log": (0..150).map(|i| json!({"metadata-file": format!("v{i}"), "timestamp-ms": i})).collect::<Vec<_>>(),
        "properties": {},
    });
    let expired = maintenance::expire(&mut metadata, now);
    assert_eq!(
        expired,
        vec![
            "/t/metadata/snap-1.avro",
            "/t/metadata/snap-2.avro",
            "/t/metadata/snap-3.avro"
        ]
    );
    let ids = |key: &str| -> Vec<i64> {
        metadata[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["snapshot-id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids("snapshots"), vec![4, 5]);
    assert_eq!(ids("snapshot-log"), vec![4, 5]);
    let log = metadata["metadata-log"].as_array().unwrap();
    assert_eq!(
        (log.len(), log[0]["metadata-file"].as_str()),
        (100, Some("v50"))
    );

    // The table's own properties: keep 4 whatever their age.
    let mut metadata = json!({
        "current-snapshot-id": 5,
        "snapshots": [snapshot(1, 9), snapshot(2, 9), snapshot(3, 9), snapshot(4, 9), snapshot(5, 9)],
        "properties": {"history.expire.min-snapshots-to-keep": "4"},
    });
    assert_eq!(maintenance::expire(&mut metadata, now).len(), 1);
}

#[tokio::test]
async fn records_stamped_at_the_ends_of_the_range_are_committed_on_the_day_their_files_say() {
    let log = tempfile::tempdir().unwrap();
    let stamped = |base: i64, ts: i64| {
        let mut s = spec(base, 0);
        s.base_ts = ts;
        simple(s, 3)
    };
    write_segment(
        log.path(),
        0,
        &[
            stamped(0, i64::MAX - 10),
            stamped(3, -1),
            stamped(6, i64::MIN + 1),
            stamped(9, MIDNIGHT),
        ],
    );
    write_segment(log.path(), 12, &[]);
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    run_export(
        &local_plan(log.path()).await,
        &target,
        ExportRange::default(),
        &options,
    )
    .await
    .unwrap();
    let c = commit(&target, "t", &[0], &options.convert).await.unwrap();
    // The batch stamped -1, 0, 1 ms spans two days: five files.
    assert_eq!((c.files, c.records), (5, 12));
    let days: Vec<i32> = table_files(out.path()).iter().map(|f| f.3).collect();
    assert!(
        days.contains(&((i64::MAX / MICROS_PER_DAY) as i32)),
        "{days:?}"
    );
    assert!(days.contains(&-1), "{days:?}");
}

/// Every data file of the current snapshot of `topic`'s table in `target`, by path, with its
/// record count (read through the target, so it works on any store).
async fn files_through(target: &Target, topic: &str) -> Vec<(String, i64)> {
    let table = load(target, topic).await.unwrap().unwrap();
    let Some(list) = table
        .current_snapshot()
        .and_then(|s| s["manifest-list"].as_str())
    else {
        return Vec::new();
    };
    let raw = target
        .read_object(topic, &rel_of(target, list).unwrap())
        .await
        .unwrap()
        .unwrap();
    let mut files = Vec::new();
    for m in decode_manifest_list(&raw).unwrap() {
        let path = m.field("manifest_path").unwrap().as_str().unwrap();
        let raw = target
            .read_object(topic, &rel_of(target, path).unwrap())
            .await
            .unwrap()
            .unwrap();
        for e in avro::read_container_file(&raw).unwrap().records {
            let df = e.field("data_file").unwrap();
            files.push((
                df.field("file_path").unwrap().as_str().unwrap().to_string(),
                df.field("record_count").unwrap().as_long().unwrap(),
            ));
        }
    }
    files.sort();
    files
}

#[tokio::test]
async fn a_bucket_that_fails_any_step_of_a_commit_leaves_a_table_that_the_next_commit_completes() {
    use crate::store::RemoteStore;
    let log = tempfile::tempdir().unwrap();
    write_segment(log.path(), 0, &batches_across_midnight(0, 3));
    write_segment(log.path(), 30, &[]);
    let options = options();
    for failing in [
        "-m0.avro",
        "snap-",
        "/v2.metadata.json",
        "version-hint",
        "partition=0/",
    ] {
        let store = Arc::new(RemoteStore::in_memory());
        let target = Arc::new(Target::Store(store.clone()));
        create_if_absent(&target, "t", &options.convert)
            .await
            .unwrap();
        run_export(
            &local_plan(log.path()).await,
            &target,
            ExportRange::default(),
            &options,
        )
        .await
        .unwrap();
        let landed: Vec<(String, u64)> = target.list_dir("t", "topic=t/partition=0").await.unwrap();
        let data_files = landed
            .iter()
            .filter(|(n, _)| n.ends_with(".parquet"))
            .count();
        store.faults.fail_keys_containing(failing);
        let failed = commit(&target, "t", &[0], &options.convert).await;
        assert!(
            failed.is_err(),
            "{failing}: the commit must report the failure"
        );
        store.faults.clear();
        commit(&target, "t", &[0], &options.convert).await.unwrap();
        let files = files_through(&target, "t").await;
        assert_eq!(files.len(), data_files, "{failing}: {files:?}");
        assert_eq!(files.iter().map(|f| f.1).sum::<i64>(), 30, "{failing}");
        let hint = target
            .read_object("t", "topic=t/metadata/version-hint.text")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            &hint[..],
            b"2",
            "{failing}: one commit, and the hint names it"
        );
    }
}

#[tokio::test]
async fn records_stamped_over_many_days_end_a_range_at_the_file_limit_and_commit_once() {
    // One batch of 40 records on 40 different days, then a batch on one day.
    let log = tempfile::tempdir().unwrap();
    let values: Vec<String> = (0..40).map(|i| format!("v{i}")).collect();
    let recs: Vec<super::super::tests::Rec> = (0..40)
        .map(|i| super::super::tests::Rec {
            offset_delta: i,
            ts_delta: i64::from(i) * DAY_MS,
            key: None,
            value: Some(values[i as usize].as_bytes()),
            headers: vec![],
        })
        .collect();
    let mut s = spec(0, 0);
    s.base_ts = MIDNIGHT;
    s.max_ts = MIDNIGHT + 39 * DAY_MS;
    let mut one_day = spec(40, 0);
    one_day.base_ts = MIDNIGHT;
    write_segment(
        log.path(),
        0,
        &[super::super::tests::batch(s, &recs), simple(one_day, 5)],
    );
    write_segment(log.path(), 45, &[]);
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    let plan = local_plan(log.path()).await;
    let summary = run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(summary.records, 45);
    // Ranges of at most MAX_DAY_FILES days: 40 single-record files, the last one-day range
    // shares its day with the final batch.
    let c = commit(&target, "t", &[0], &options.convert).await.unwrap();
    assert_eq!(c.records, 45);
    let files = table_files(out.path());
    let mut offsets: Vec<i64> = files.iter().flat_map(|f| rows(&f.0)).map(|r| r.0).collect();
    offsets.sort();
    assert_eq!(offsets, (0..45).collect::<Vec<_>>());
    // A re-run from a checkpoint inside the batch (a crash after the first cut range) writes
    // the same files.
    let names = |out: &Path| -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(out.join("topic=t/partition=0"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".parquet"))
            .collect();
        n.sort();
        n
    };
    let before = names(out.path());
    // Three ranges: 16 days, 16 days, and 8 days plus the last batch's day.
    assert_eq!((before.len(), files.len()), (41, 41));
    let cut = crate::export::convert::MAX_DAY_FILES as i64;
    target
        .write_checkpoint("t", 0, Checkpoint::new("t", 0, cut, None, None), None)
        .await
        .unwrap();
    run_export(&plan, &target, ExportRange::default(), &options)
        .await
        .unwrap();
    assert_eq!(names(out.path()), before);
}

#[tokio::test]
async fn expiring_the_snapshots_before_a_merge_deletes_the_manifests_it_replaced() {
    let log = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = dir_target(out.path());
    let options = options();
    create_if_absent(&target, "t", &options.convert)
        .await
        .unwrap();
    // Keep only the newest snapshot: every older one expires at the next commit.
    let meta = out.path().join("topic=t/metadata");
    let hint = std::fs::read_to_string(meta.join("version-hint.text")).unwrap();
    let path = meta.join(format!("v{}.metadata.json", hint.trim()));
    let mut m: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["properties"]["history.expire.max-snapshot-age-ms"] = Json::from("0");
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let manifests_on_disk = || {
        let mut names: Vec<String> = std::fs::read_dir(&meta)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with("-m0.avro"))
            .collect();
        names.sort();
        names
    };
    let commits = maintenance::MIN_COUNT_TO_MERGE + 3;
    for i in 0..commits as i64 {
        export_and_commit_segment(log.path(), &target, &options, i).await;
        if (i as usize) < maintenance::MIN_COUNT_TO_MERGE - 1 {
            // No merge yet: every manifest is still in the current snapshot.
            assert_eq!(manifests_on_disk().len(), i as usize + 1);
        }
    }
    // Every record is in the table once, and only the current snapshot's manifests remain.
    let files = table_files(out.path());
    assert_eq!(files.len(), commits);
    let table = load(&target, "t").await.unwrap().unwrap();
    assert_eq!(table.metadata["snapshots"].as_array().unwrap().len(), 1);
    let list = table.current_snapshot().unwrap()["manifest-list"]
        .as_str()
        .unwrap()
        .to_string();
    let mut current: Vec<String> = decode_manifest_list(&std::fs::read(&list).unwrap())
        .unwrap()
        .iter()
        .map(|m| {
            let p = m.field("manifest_path").unwrap().as_str().unwrap();
            p.rsplit('/').next().unwrap().to_string()
        })
        .collect();
    current.sort();
    assert!(current.len() <= 4, "{current:?}");
    assert_eq!(manifests_on_disk(), current, "no manifest left behind");
    let lists = std::fs::read_dir(&meta)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("snap-")
        })
        .count();
    assert_eq!(lists, 1, "one manifest list: the current snapshot's");
}

#[test]
fn manifests_are_only_cleaned_up_on_a_single_chain_of_snapshots() {
    let snap = |seq: i64, id: i64, parent: Option<i64>| {
        let mut s = serde_json::json!({"sequence-number": seq, "snapshot-id": id});
        if let Some(p) = parent {
            s["parent-snapshot-id"] = Json::from(p);
        }
        s
    };
    let chain = serde_json::json!({
        "current-snapshot-id": 3,
        "refs": {"main": {"snapshot-id": 3, "type": "branch"}},
        "snapshots": [snap(2, 2, Some(1)), snap(3, 3, Some(2))],
    });
    assert!(maintenance::one_chain(&chain));
    // Rolled back to an older snapshot: the newest is not current.
    let mut rolled_back = chain.clone();
    rolled_back["current-snapshot-id"] = Json::from(2);
    assert!(!maintenance::one_chain(&rolled_back));
    // A branch or a tag.
    let mut tagged = chain.clone();
    tagged["refs"]["audit"] = serde_json::json!({"snapshot-id": 2, "type": "tag"});
    assert!(!maintenance::one_chain(&tagged));
    // A snapshot whose parent is not the one before it.
    let mut forked = chain.clone();
    forked["snapshots"][1] = snap(3, 3, Some(7));
    assert!(!maintenance::one_chain(&forked));
}
