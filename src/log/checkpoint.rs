//! Kafka's text checkpoint files: a version line, a count line, then one entry per line.
//! Used for `leader-epoch-checkpoint` (per partition) and the per-log-dir
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
//! `replication-offset-checkpoint`. Written to a temp file, fsynced, then renamed; a failed
//! write (a full disk, EIO) removes the temp file and leaves the previous checkpoint whole.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use super::io_fault;

/// Writes `lines` in checkpoint format atomically: either the new checkpoint is in place or
/// the old one is untouched.
pub fn write(path: &Path, lines: &[String]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut text = format!("0\n{}\n", lines.len());
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let written = (|| {
        let f = File::create(&tmp)?;
        io_fault::write_all(&f, || tmp.clone(), text.as_bytes())?;
        io_fault::sync_all(&f, || tmp.clone())?;
        io_fault::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Reads the entry lines of a checkpoint file; a missing file reads as empty.
pub fn read(path: &Path) -> io::Result<Vec<String>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let bad = |m: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {m}", path.display()),
        )
    };
    let mut lines = text.lines();
    match lines.next() {
        Some("0") => {}
        _ => return Err(bad("unsupported checkpoint version")),
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad("missing entry count"))?;
    let entries: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if entries.len() != count {
        return Err(bad("entry count does not match"));
    }
    Ok(entries)
}

/// Parses `topic partition offset` entries.
pub fn read_offsets(path: &Path) -> io::Result<Vec<(String, i32, i64)>> {
    let mut out = Vec::new();
    for line in read(path)? {
        let mut parts = line.rsplitn(3, ' ');
        let (Some(off), Some(part), Some(topic)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad checkpoint line {line:?}"),
            ));
        };
        match (part.parse(), off.parse()) {
            (Ok(p), Ok(o)) => out.push((topic.to_string(), p, o)),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad checkpoint line {line:?}"),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::io_fault::{inject, Fault, Op, ENOSPC};

    #[test]
    fn a_failed_checkpoint_write_fsync_or_rename_leaves_the_old_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("recovery-point-offset-checkpoint");
        write(&p, &["a 0 5".into()]).unwrap();
        for fault in [
            Fault::new(dir.path(), Op::Write)
                .errno(ENOSPC)
                .short_write(),
            Fault::new(dir.path(), Op::Sync),
            Fault::new(dir.path(), Op::Rename),
        ] {
            let op = fault.op;
            let guard = inject(fault);
            let e = write(&p, &["a 0 9".into(), "b 1 3".into()]).unwrap_err();
            assert!(e.raw_os_error().is_some(), "{op:?}: {e}");
            assert_eq!(guard.failures(), 1, "{op:?}");
            drop(guard);
            assert_eq!(
                read_offsets(&p).unwrap(),
                vec![("a".into(), 0, 5)],
                "{op:?}"
            );
            let names: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect();
            assert_eq!(
                names,
                vec!["recovery-point-offset-checkpoint"],
                "{op:?}: no temp file left"
            );
        }
        write(&p, &["a 0 9".into()]).unwrap();
        assert_eq!(read_offsets(&p).unwrap(), vec![("a".into(), 0, 9)]);
    }

    #[test]
    fn offsets_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("recovery-point-offset-checkpoint");
        write(&p, &["a 0 5".into(), "my topic 3 77".into()]).unwrap();
        assert_eq!(
            read_offsets(&p).unwrap(),
            vec![("a".into(), 0, 5), ("my topic".into(), 3, 77)]
        );
        assert!(read_offsets(&dir.path().join("missing"))
            .unwrap()
            .is_empty());
    }
}
