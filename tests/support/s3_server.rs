//! A real S3-compatible server for tests, started on a free 127.0.0.1 port and stopped on drop.
//!
//! Std-only on purpose: test crates include it by path,
//! `#[path = "../../tests/support/s3_server.rs"] mod s3_server;`, without adding dependencies.
//!
//! Two servers, each found through an environment variable, then the place
//! `scripts/install-test-deps.sh` installs it, then `PATH`:
//!
//! | kind | binary | checks SigV4 | from |
//! |---|---|---|---|
//! | [`S3Kind::Moto`] | `$STRATA_MOTO_SERVER`, `$STRATA_VENV/bin/moto_server` | no | PyPI `moto[s3]` |
//! | [`S3Kind::S3sFs`] | `$STRATA_S3S_FS`, `$STRATA_CACHE/s3s-fs/bin/s3s-fs` | yes | crates.io `s3s-fs` |
//!
//! (`STRATA_CACHE` defaults to `~/.cache/strata`, `STRATA_VENV` to `$STRATA_CACHE/venv`.)
//!
//! Each server gets its own temp dir holding its log (`server.log`) and, for s3s-fs, its data
//! root, whose top-level directories are the buckets. The bucket is created before
//! [`S3Server::start`] returns. A test that finds a binary missing should skip, not fail:
//! [`S3Server::start_if_installed`] returns `Ok(None)` after printing why.
//!
//! Quirks worth knowing when a test fails:
//! - moto accepts any signature and any credentials; only s3s-fs proves that requests are signed.
//! - moto answers an anonymous GET of a (private) object with 403: see [`S3Server::raw_request`].
//!   It refuses bucket names shorter than 3 characters.
//! - s3s-fs answers a suffix range longer than the object (`Range: bytes=-N`, N > size) with
//!   500 instead of the whole object. It keeps per-object metadata in `.bucket-*.json` files in
//!   the root, beside (not inside) the bucket directories. Both honour `If-None-Match: *` and
//!   `If-Match: <etag>` on PUT (412 PreconditionFailed).
//! - On drop the child is killed and waited for; when the thread is panicking the temp dir is
//!   kept and its path printed, so the server log survives a failed test.
//! - The server gets SIGTERM when the thread that started it exits (Linux `PR_SET_PDEATHSIG`,
//!   so that a killed test run leaks no server). Start one per test; a server kept in a shared
//!   `static` would die with the first test's thread.

#![allow(dead_code)] // each test crate uses a different part of it

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a server may take to answer HTTP after it was spawned (moto needs ~3 s).
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts at spawning on a fresh port: another process may grab the port we picked between
/// our probe and the server's bind.
const SPAWN_ATTEMPTS: u32 = 3;
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S3Kind {
    /// `moto_server` (PyPI `moto[s3]`): starts in seconds, ignores signatures.
    Moto,
    /// `s3s-fs` (crates.io): stores objects as files, verifies SigV4.
    S3sFs,
}

impl S3Kind {
    pub fn name(self) -> &'static str {
        match self {
            S3Kind::Moto => "moto",
            S3Kind::S3sFs => "s3s-fs",
        }
    }

    fn env_var(self) -> &'static str {
        match self {
            S3Kind::Moto => "STRATA_MOTO_SERVER",
            S3Kind::S3sFs => "STRATA_S3S_FS",
        }
    }

    fn program(self) -> &'static str {
        match self {
            S3Kind::Moto => "moto_server",
            S3Kind::S3sFs => "s3s-fs",
        }
    }

    fn installed_path(self) -> PathBuf {
        match self {
            S3Kind::Moto => strata_venv().join("bin").join("moto_server"),
            S3Kind::S3sFs => strata_cache().join("s3s-fs").join("bin").join("s3s-fs"),
        }
    }

    /// The server binary: `$STRATA_MOTO_SERVER` / `$STRATA_S3S_FS`, else where
    /// `scripts/install-test-deps.sh` puts it, else `PATH`. `Err(NotFound)` says where it
    /// looked; a variable naming a missing file is a mistake, `Err(InvalidInput)`, not a skip.
    pub fn binary(self) -> io::Result<PathBuf> {
        if let Some(p) = std::env::var_os(self.env_var()).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}={} does not exist", self.env_var(), p.display()),
                ))
            };
        }
        let installed = self.installed_path();
        if installed.is_file() {
            return Ok(installed);
        }
        if let Some(p) = find_in_path(self.program()) {
            return Ok(p);
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} not found (looked at ${}, {} and PATH); run scripts/install-test-deps.sh",
                self.program(),
                self.env_var(),
                installed.display()
            ),
        ))
    }
}

impl fmt::Display for S3Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A running S3-compatible server with one bucket. Killed (and its temp dir removed) on drop.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    pub kind: S3Kind,
    addr: SocketAddr,
    child: Child,
    dir: PathBuf,
    log_path: PathBuf,
    /// s3s-fs only: the data root; `<root>/<bucket>/<key>` is an object.
    root: Option<PathBuf>,
}

/// An HTTP response read by [`S3Server::raw_request`].
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl S3Server {
    /// Start a server of `kind` with `bucket` created. `Err(NotFound)` if the binary is missing.
    pub fn start(kind: S3Kind, bucket: &str) -> io::Result<S3Server> {
        let binary = kind.binary()?;
        let mut last_err = None;
        for _ in 0..SPAWN_ATTEMPTS {
            match Self::spawn(kind, &binary, bucket) {
                Ok(server) => return Ok(server),
                // Lost the port race (or a flaky start): try again on another port.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no attempt made")))
    }

    /// Like [`start`](Self::start), but `Ok(None)` (after printing why to stderr) when the
    /// binary is not installed, so that a test can return early and count as skipped.
    pub fn start_if_installed(kind: S3Kind, bucket: &str) -> io::Result<Option<S3Server>> {
        match Self::start(kind, bucket) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                eprintln!("SKIPPED: no {kind} server: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `s3://<bucket>/<prefix>` (just `s3://<bucket>` for an empty prefix).
    pub fn url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, prefix)
        }
    }

    /// The broker settings that point Strata's remote store at this server and `prefix`.
    pub fn store_settings(&self, prefix: &str) -> Vec<(String, String)> {
        [
            ("strata.remote.store.url", self.url(prefix)),
            ("strata.remote.store.endpoint", self.endpoint.clone()),
            ("strata.remote.store.region", self.region.clone()),
            ("strata.remote.store.access.key.id", self.access_key.clone()),
            (
                "strata.remote.store.secret.access.key",
                self.secret_key.clone(),
            ),
            ("strata.remote.store.path.style", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// s3s-fs only: the directory whose top-level directories are the buckets.
    pub fn root_dir(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the server's output.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path, lines)
    }

    /// Every object key in the bucket, sorted. moto: ListObjectsV2 over raw HTTP (following
    /// continuation tokens); s3s-fs: a walk of `<root>/<bucket>`.
    pub fn object_keys(&self) -> io::Result<Vec<String>> {
        let mut keys = match &self.root {
            Some(root) => {
                let mut keys = Vec::new();
                walk_files(&root.join(&self.bucket), "", &mut keys)?;
                keys
            }
            None => self.list_keys_http()?,
        };
        keys.sort();
        Ok(keys)
    }

    /// The keys that start with `prefix`, sorted.
    pub fn object_keys_with_prefix(&self, prefix: &str) -> io::Result<Vec<String>> {
        let mut keys = self.object_keys()?;
        keys.retain(|k| k.starts_with(prefix));
        Ok(keys)
    }

    /// One HTTP/1.1 request with a fake signature (`path` includes the query, percent-encoded).
    /// Only moto accepts it: moto never checks signatures, but it answers an anonymous GET of a
    /// private object with 403, so the request carries a SigV4-shaped `Authorization` header
    /// naming our access key. s3s-fs refuses it with 403.
    pub fn raw_request(&self, method: &str, path: &str, body: &[u8]) -> io::Result<HttpResponse> {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={}/20260101/{}/s3/aws4_request, \
             SignedHeaders=host, Signature={}",
            self.access_key,
            self.region,
            "0".repeat(64)
        );
        // Without a Content-Type, moto's Flask front end could take a body for form data.
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/octet-stream"),
        ];
        http_request(self.addr, method, path, &headers, body, IO_TIMEOUT)
    }

    fn spawn(kind: S3Kind, binary: &Path, bucket: &str) -> io::Result<S3Server> {
        let port = free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let dir = make_temp_dir(kind)?;
        let log_path = dir.join("server.log");
        let access_key = "strata-test-access-key".to_string();
        let secret_key = "strata-test-secret-key".to_string();

        let mut cmd = Command::new(binary);
        let root = match kind {
            S3Kind::Moto => {
                cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
                None
            }
            S3Kind::S3sFs => {
                let root = dir.join("root");
                // s3s-fs has no CreateBucket of its own: a bucket is a top-level directory.
                fs::create_dir_all(root.join(bucket))?;
                cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--access-key", &access_key, "--secret-key", &secret_key])
                    .arg(&root)
                    .env("RUST_LOG", "info");
                Some(root)
            }
        };
        let log = File::create(&log_path)?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .current_dir(&dir);
        stop_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("spawning {}: {e}", binary.display())))?;

        let mut server = S3Server {
            endpoint: format!("http://{addr}"),
            bucket: bucket.to_string(),
            access_key,
            secret_key,
            region: "us-east-1".to_string(),
            kind,
            addr,
            child,
            dir,
            log_path,
            root,
        };
        server.wait_until_ready()?;
        if kind == S3Kind::Moto {
            server.create_bucket_raw()?;
        }
        Ok(server)
    }

    fn wait_until_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let tail = self.log_tail(30);
                let kind = if tail.contains("Address already in use") {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                return Err(io::Error::new(
                    kind,
                    format!(
                        "{} exited before serving ({status}); log tail:\n{tail}",
                        self.kind
                    ),
                ));
            }
            // Any HTTP answer will do: s3s-fs refuses the unsigned request, moto lists buckets.
            if http_request(self.addr, "GET", "/", &[], b"", PROBE_TIMEOUT).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not answer HTTP on {} within {:?}; log tail:\n{}",
                        self.kind,
                        self.endpoint,
                        READY_TIMEOUT,
                        self.log_tail(30)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn create_bucket_raw(&self) -> io::Result<()> {
        let resp = self.raw_request("PUT", &format!("/{}", self.bucket), b"")?;
        if resp.status != 200 {
            return Err(io::Error::other(format!(
                "{}: PUT /{} returned {}: {}",
                self.kind,
                self.bucket,
                resp.status,
                resp.body_text()
            )));
        }
        Ok(())
    }

    fn list_keys_http(&self) -> io::Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut path = format!("/{}?list-type=2", self.bucket);
            if let Some(t) = &token {
                path.push_str("&continuation-token=");
                path.push_str(&percent_encode(t));
            }
            let resp = self.raw_request("GET", &path, b"")?;
            let body = resp.body_text();
            if resp.status != 200 {
                return Err(io::Error::other(format!(
                    "{}: GET {path} returned {}: {body}",
                    self.kind, resp.status
                )));
            }
            keys.extend(
                xml_elements(&body, "Key")
                    .into_iter()
                    .map(|k| xml_unescape(&k)),
            );
            let truncated = xml_elements(&body, "IsTruncated")
                .first()
                .map(String::as_str)
                == Some("true");
            token = xml_elements(&body, "NextContinuationToken")
                .into_iter()
                .next()
                .map(|t| xml_unescape(&t));
            if !truncated || token.is_none() {
                return Ok(keys);
            }
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "{} server log kept at {}",
                self.kind,
                self.log_path.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ------------------------------------------------------------------------------------- env

fn strata_cache() -> PathBuf {
    match std::env::var_os("STRATA_CACHE").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => home().join(".cache").join("strata"),
    }
}

fn strata_venv() -> PathBuf {
    match std::env::var_os("STRATA_VENV").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => strata_cache().join("venv"),
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

// ------------------------------------------------------------------------------- processes

/// Ask Linux to SIGTERM the server when the test process dies (e.g. killed by a CI timeout),
/// so that no server outlives its test.
#[cfg(target_os = "linux")]
fn stop_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    unsafe extern "C" {
        fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    }
    const PR_SET_PDEATHSIG: i32 = 1;
    const SIGTERM: u64 = 15;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn stop_with_parent(_cmd: &mut Command) {}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn make_temp_dir(kind: S3Kind) -> io::Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    loop {
        let dir = std::env::temp_dir().join(format!(
            "strata-{}-{}-{}-{nanos:x}",
            kind.name(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(data) => {
            let text = String::from_utf8_lossy(&data);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<no log at {}: {e}>", path.display()),
    }
}

/// Files under `dir`, as `/`-separated keys relative to the walk's start.
fn walk_files(dir: &Path, prefix: &str, out: &mut Vec<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = format!("{prefix}{name}");
        if entry.file_type()?.is_dir() {
            walk_files(&entry.path(), &format!("{key}/"), out)?;
        } else {
            out.push(key);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------ HTTP

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), body read to the end.
fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    // No half-close after the request: hyper (s3s-fs) drops a connection whose client shut
    // its write side without answering. `Connection: close` ends the response instead.
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> io::Result<HttpResponse> {
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad HTTP response: {what}"),
        )
    };
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| bad("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    if !status_line.starts_with("HTTP/1.") {
        return Err(bad(status_line));
    }
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad(status_line))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut resp = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[head_end + 4..];
    resp.body = if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest).ok_or_else(|| bad("broken chunked body"))?
    } else if let Some(len) = resp
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        rest.get(..len)
            .ok_or_else(|| bad("body shorter than Content-Length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(resp)
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of every `<tag>...</tag>` element, in document order (no nesting within `tag`).
fn xml_elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        rest = &rest[start + open.len()..];
        match rest.find(&close) {
            Some(end) => {
                out.push(rest[..end].to_string());
                rest = &rest[end + close.len()..];
            }
            None => break,
        }
    }
    out
}

fn xml_unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest.find(';') else { break };
        let entity = &rest[1..semi];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
