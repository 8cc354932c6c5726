//! Network fuzzer: mutated request frames over many connections against a running broker.
//!
//! ```text
//! strata-netfuzz --addr 127.0.0.1:9092 [--connections 16] [--seconds 30] [--seed N] [--pid PID]
//! ```
//! Each connection sends frames mutated from a valid request of every API key and version
//! (sometimes with a size prefix that lies), reads what comes back, and reconnects when the
//! broker closes it. A control connection asks ApiVersions every half second and must be
//! answered within 5 s. With `--pid`, the broker's resident memory is sampled. Prints one
//! summary line and exits non-zero if the broker stopped answering or its process died.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind};
use kafka_protocol::protocol::StrBytes;
use strata_fuzz::mutate::Mutator;
use strata_fuzz::seeds;

struct Args {
    addr: SocketAddr,
    connections: usize,
    seconds: f64,
    seed: u64,
    pid: Option<u32>,
}

fn parse_args() -> Result<Args, String> {
    let mut addr = None;
    let mut connections = 16;
    let mut seconds = 30.0;
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut pid = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => addr = Some(value()?.parse().map_err(|e| format!("--addr: {e}"))?),
            "--connections" => connections = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seconds" => seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("{e}"))?,
            "--pid" => pid = Some(value()?.parse().map_err(|e| format!("{e}"))?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        addr: addr.ok_or("--addr is required")?,
        connections,
        seconds,
        seed,
        pid,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("strata-netfuzz: {e}");
            std::process::exit(2);
        }
    };
    let frames = Arc::new(seeds::request_frames());
    let inputs = Arc::new(AtomicU64::new(0));
    let reconnects = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..args.connections {
        let (frames, inputs, reconnects, stop) = (
            frames.clone(),
            inputs.clone(),
            reconnects.clone(),
            stop.clone(),
        );
        let (addr, seed) = (args.addr, args.seed.wrapping_add(i as u64 * 0x9e37_79b9));
        workers.push(std::thread::spawn(move || {
            fuzz_connection(addr, seed, &frames, &inputs, &reconnects, &stop)
        }));
    }
    let mut control_ok = 0u64;
    let mut control_failed = 0u64;
    let mut peak_rss_kib = 0u64;
    let mut died = false;
    let deadline = started + Duration::from_secs_f64(args.seconds);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        if let Some(pid) = args.pid {
            match status_kib(pid, "VmRSS:") {
                Some(rss) => peak_rss_kib = peak_rss_kib.max(rss),
                None => {
                    died = true;
                    break;
                }
            }
        }
        match control_request(args.addr) {
            Ok(()) => control_ok += 1,
            Err(e) => {
                control_failed += 1;
                eprintln!("strata-netfuzz: control request failed: {e}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    if let Some(pid) = args.pid {
        if let Some(hwm) = status_kib(pid, "VmHWM:") {
            peak_rss_kib = peak_rss_kib.max(hwm);
        } else {
            died = true;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = inputs.load(Ordering::Relaxed);
    println!(
        "netfuzz: seed {} inputs {} inputs/s {:.0} connections {} reconnects {} control ok {} failed {} peak RSS {} broker {}",
        args.seed,
        n,
        n as f64 / elapsed,
        args.connections,
        reconnects.load(Ordering::Relaxed),
        control_ok,
        control_failed,
        if args.pid.is_some() { format!("{} MiB", peak_rss_kib / 1024) } else { "n/a".into() },
        if died { "DIED" } else { "alive" },
    );
    if died || control_failed > 0 || control_ok == 0 {
        std::process::exit(1);
    }
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

fn fuzz_connection(
    addr: SocketAddr,
    seed: u64,
    frames: &[Vec<u8>],
    inputs: &AtomicU64,
    reconnects: &AtomicU64,
    stop: &AtomicBool,
) {
    let mut m = Mutator::new(seed);
    let mut sink = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        reconnects.fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(1)));
        let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
        'conn: while !stop.load(Ordering::Relaxed) {
            let base = &frames[m.below(frames.len())];
            let other = &frames[m.below(frames.len())];
            let body = if m.below(8) == 0 {
                base.clone()
            } else {
                m.mutate(base, other, 1 << 16)
            };
            // Mostly the true size; sometimes a lie (short: the rest reads as the next frame;
            // long: the broker waits for bytes that never come).
            let size = match m.below(16) {
                0 => body.len() as i64 + 1 + m.below(1 << 20) as i64,
                1 => m.below(body.len() + 1) as i64,
                2 => [i32::MAX as i64, -1, 0, 7][m.below(4)],
                _ => body.len() as i64,
            };
            let mut frame = (size as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&body);
            inputs.fetch_add(1, Ordering::Relaxed);
            if stream.write_all(&frame).is_err() {
                break 'conn;
            }
            loop {
                match stream.read(&mut sink) {
                    Ok(0) => break 'conn,
                    Ok(_) => continue,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        break
                    }
                    Err(_) => break 'conn,
                }
            }
        }
    }
}

/// ApiVersions v3 on a fresh connection, answered within 5 s.
fn control_request(addr: SocketAddr) -> Result<(), String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let body = seeds::frame(
        ApiKey::ApiVersions,
        3,
        4242,
        &RequestKind::ApiVersions(
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("strata-netfuzz"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        ),
    )
    .ok_or("encode ApiVersions")?;
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream
        .write_all(&frame)
        .map_err(|e| format!("write: {e}"))?;
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .map_err(|e| format!("read: {e}"))?;
    let size = i32::from_be_bytes(size);
    if !(4..=1 << 20).contains(&size) {
        return Err(format!("response size {size}"));
    }
    let mut resp = vec![0u8; size as usize];
    stream
        .read_exact(&mut resp)
        .map_err(|e| format!("read: {e}"))?;
    if resp[..4] != 4242i32.to_be_bytes() {
        return Err("wrong correlation id".into());
    }
    Ok(())
}
