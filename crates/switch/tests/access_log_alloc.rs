//! What a logged request costs in heap allocations, counted through the real switch on
//! loopback: the same keep-alive requests with logging off, with a Combined log and with a
//! JSON log; the difference is the log's share. A counting global allocator sees every thread
//! of this test binary (client, back-end, switch, log writer) and no other binary, which is
//! why this file holds a single test: nothing else may allocate while it counts.

#[path = "it/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Allocations and reallocations since the start.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counting;

// SAFETY: every call is handed unchanged to the system allocator, whose contract is the one
// `GlobalAlloc` states; counting touches only an atomic and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WARM_UP: u64 = 200;
const MEASURED: u64 = 1_000;

/// The request every round sends: a Combined line carries its referer and user agent.
const REQUEST: &[u8] = b"GET /alloc?x=1 HTTP/1.1\r\nHost: switch.test\r\n\
    User-Agent: alloc-test \"quoted\"\r\nReferer: http://r.example/\r\n\r\n";

/// Sends one request on a kept-alive connection and reads its whole response, reusing `buf`.
async fn exchange(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    stream.write_all(REQUEST).await.unwrap();
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the switch closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..head_end]).unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a Content-Length");
        if buf.len() >= head_end + 4 + length {
            return;
        }
    }
}

/// Waits until the log, if any, has written `lines` (the writer's own allocations are then
/// counted).
async fn written(sw: &capstan_switch::Running, lines: u64) {
    let log = sw.switch.access_log.as_ref();
    wait_until("the log's lines written", || {
        log.is_none_or(|log| log.written() >= lines)
    })
    .await;
}

/// Allocations per request through a switch configured with `extra`, and how many lines per
/// channel send the log made (none without a log).
async fn allocations_per_request(backend: &Backend, extra: &str) -> (f64, Option<f64>) {
    let sw = start_switch(&config_for(&[backend], extra)).await;
    let mut stream = TcpStream::connect(sw.listen_addrs[0]).await.unwrap();
    let mut buf = Vec::with_capacity(16 * 1024);
    for _ in 0..WARM_UP {
        exchange(&mut stream, &mut buf).await;
    }
    written(&sw, WARM_UP).await;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..MEASURED {
        exchange(&mut stream, &mut buf).await;
    }
    written(&sw, WARM_UP + MEASURED).await;
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    let lines_per_send = sw.switch.access_log.as_ref().map(|log| {
        assert_eq!(log.dropped(), 0);
        log.written() as f64 / log.handed_over().max(1) as f64
    });
    drop(stream);
    sw.switch.shutdown();
    sw.wait().await;
    ((after - before) as f64 / MEASURED as f64, lines_per_send)
}

fn log_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Allocations a logged request may add: none in steady state (its notes and the body wrapper
/// that counts its bytes are reused; a full 64 KiB buffer is replaced by one the writer has
/// written and given back). Before lines were formatted on the workers it was 4
/// (Combined: two for the notes and the wrapper, two because the head values held for 20 ms
/// made hyper allocate fresh read buffers) and 60 (JSON: a `serde_json::Value`).
const ALLOWED_PER_LOGGED_REQUEST: f64 = 0.5;

/// Lines a channel send carries at least (a 64 KiB buffer holds some 150 JSON lines, 400
/// Combined ones; a send per request would make it 1).
const LINES_PER_SEND: f64 = 50.0;

#[tokio::test]
async fn a_logged_request_allocates_nothing_in_steady_state() {
    let backend = Backend::start("a").await;
    let (off, _) = allocations_per_request(&backend, "").await;
    let combined = format!("[access_log]\npath = {:?}\n", log_file("combined.log"));
    let (combined, combined_sends) = allocations_per_request(&backend, &combined).await;
    let json = format!(
        "[access_log]\npath = {:?}\nformat = \"json\"\n",
        log_file("json.log")
    );
    let (json, json_sends) = allocations_per_request(&backend, &json).await;
    eprintln!(
        "allocations per request: log off {off:.2}, combined {combined:.2} (+{:.2}), \
         json {json:.2} (+{:.2}); lines per channel send: combined {combined_sends:?}, \
         json {json_sends:?}",
        combined - off,
        json - off
    );
    for (format, with_log, sends) in [
        ("combined", combined, combined_sends),
        ("json", json, json_sends),
    ] {
        assert!(
            with_log - off <= ALLOWED_PER_LOGGED_REQUEST,
            "{format}: {with_log:.2} allocations per request, {off:.2} without a log"
        );
        let sends = sends.expect("a log");
        assert!(
            sends >= LINES_PER_SEND,
            "{format}: {sends:.0} lines per channel send"
        );
    }
}
