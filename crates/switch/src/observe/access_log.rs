//! The access log: one line per request, in Common or Combined Log Format (readable by
//! `capstan bench --replay`) or as JSON lines with the request's timings, class, policy
//! decision, node, status, bytes and cache status.
//!
//! Built as nginx's buffered log is: each line is written by the thread that served the
//! request, into that thread's buffer in this log (a thread-local; the CLF and ISO dates are
//! formatted once per second per thread). A Common or Combined line is formatted when the
//! request head arrives, but for the status and byte count, put in when the response ends; a
//! JSON line, which also says what the proxy did and when, is formatted at the end. A buffer that
//! reaches 64 KiB (or `buffer` lines) goes to the writer thread in one channel send; the writer
//! also takes every thread's buffer each [`FLUSH_INTERVAL`], so a quiet thread's lines reach the
//! file within that time. At most `buffer` lines wait in the channel; past it a full buffer's
//! lines are dropped and counted (`capstan_access_log_dropped_total`) rather than making a
//! worker wait for the disk. Dropping the [`AccessLog`] writes everything queued and buffered.
//! `SIGUSR1` asks the writer to reopen the file (logrotate's `postrotate`).
//!
//! What happens deep in the proxy (the class, the node picked, when the request went out and
//! when its head came back) is noted through a task-local [`Notes`], so the proxy's functions
//! need no extra parameters and cost one thread-local lookup when the request is not logged;
//! only JSON lines write them, so Common and Combined lines take none.
//! A Common or Combined line holds none of the request's head values, and a JSON line holds its
//! URI, `Host`, `Referer` and `User-Agent` (reference-counted views of hyper's read buffer) only
//! until the response ends, so the connection's buffer is free again before its next request is
//! read. Each thread keeps finished requests' notes and logged-body boxes for its next requests,
//! so a logged request allocates nothing in steady state (`tests/access_log_alloc.rs` counts).

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::header::HeaderValue;
use http::{Method, Uri, Version};

use crate::config::sections::access_log::{AccessLogConfig, LogFormat};

/// When a request's steps happened, relative to the arrival of its head.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Timings {
    /// How long before the request head the client connection was accepted.
    pub since_accept: Option<Duration>,
    /// The policy picked a node.
    pub dispatch: Option<Duration>,
    /// The node's admission let it through and it was handed to a node connection.
    pub sent: Option<Duration>,
    /// A new connection to the node was established (absent: a pooled one was reused).
    pub connect: Option<Duration>,
    /// The node's response head arrived.
    pub first_byte: Option<Duration>,
    /// The last byte of the response was handed to the client connection.
    pub end: Option<Duration>,
}

/// Everything one log line says.
#[derive(Debug)]
pub(crate) struct Record {
    pub time: SystemTime,
    pub client: HeaderValue,
    pub client_port: Option<u16>,
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub host: Option<HeaderValue>,
    pub referer: Option<HeaderValue>,
    pub user_agent: Option<HeaderValue>,
    pub status: u16,
    pub bytes: u64,
    /// The response was sent whole (false: the client left or the node failed mid-body).
    pub completed: bool,
    pub class: Option<HeaderValue>,
    pub node: Option<HeaderValue>,
    pub decision: &'static str,
    pub cache_status: Option<HeaderValue>,
    pub timings: Timings,
}

/// A thread hands its buffer to the writer once it holds this much (nginx's `buffer=64k`).
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// How long a line may wait in a thread's buffer that is not full: the writer takes every
/// buffer this often (nginx's `flush=1s`; shorter here, since a sweep costs the writer one
/// lock per thread and a worker at most a moment's wait on its buffer's lock).
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Formatted lines on their way to the file.
#[derive(Default)]
pub(crate) struct Chunk {
    bytes: Vec<u8>,
    lines: u64,
}

/// One thread's buffer in one log: written by that thread only, taken by the writer's sweep.
/// The mutex is uncontended but for the instant of a sweep (two atomic operations a line,
/// no system call); it is what lets the writer take a buffer whose thread has gone quiet.
pub(crate) struct Slot {
    chunk: Mutex<Chunk>,
    /// The log has closed: a thread drops this slot at its next registration.
    closed: AtomicBool,
}

impl Slot {
    fn new(capacity: usize) -> Slot {
        Slot {
            chunk: Mutex::new(Chunk {
                bytes: Vec::with_capacity(capacity),
                lines: 0,
            }),
            closed: AtomicBool::new(false),
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// This thread's slot in each open log, by the log's id (a process usually has one log;
    /// tests start many).
    static SLOTS: RefCell<Vec<(u64, Arc<Slot>)>> = const { RefCell::new(Vec::new()) };

    /// The current second's dates, formatted once per second per thread.
    static DATES: RefCell<DateCache> = RefCell::new(DateCache::default());
}

/// Runs `use_dates` with this thread's date cache (a fresh one on a thread whose thread-locals
/// are already gone).
pub(crate) fn with_dates<T>(use_dates: impl FnOnce(&mut DateCache) -> T) -> T {
    let mut use_dates = Some(use_dates);
    let done = DATES.try_with(|dates| {
        let use_dates = use_dates.take().expect("called once");
        use_dates(&mut dates.borrow_mut())
    });
    done.unwrap_or_else(|_| (use_dates.take().expect("not called"))(&mut DateCache::default()))
}

/// Tells logs apart in [`SLOTS`].
pub(crate) static NEXT_LOG_ID: AtomicU64 = AtomicU64::new(0);

/// What the workers and the writer thread share.
pub(crate) struct Shared {
    /// Every thread's slot; the writer sweeps them.
    slots: Mutex<Vec<Arc<Slot>>>,
    /// For a thread whose thread-locals are already gone (a body dropped while it exits).
    fallback: Arc<Slot>,
    /// Lines handed over and not yet written (at most the configured `buffer`).
    queued: AtomicU64,
    dropped: AtomicU64,
    written: AtomicU64,
    handed_over: AtomicU64,
    reopen: AtomicBool,
    /// Written buffers, emptied, for the threads' next chunks and the writer's sweeps: in
    /// steady state no buffer is allocated (nor its memory touched for the first time).
    spare_buffers: Mutex<Vec<Vec<u8>>>,
}

/// Emptied buffers kept for reuse at most.
pub(crate) const MAX_SPARE_BUFFERS: usize = 8;

impl Shared {
    /// An empty buffer with room for a chunk: a spare one when there is one.
    fn empty_buffer(&self, capacity: usize) -> Vec<u8> {
        lock(&self.spare_buffers)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps a written buffer for reuse (or frees it when enough are kept).
    fn give_back(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        let mut spares = lock(&self.spare_buffers);
        if spares.len() < MAX_SPARE_BUFFERS {
            spares.push(buffer);
        }
    }
}

/// The running access log: the threads' buffers, the channel to the writer and its counters.
pub struct AccessLog {
    id: u64,
    pub(crate) format: LogFormat,
    sample: u64,
    seen: AtomicU64,
    /// A thread hands its buffer over at this many lines (or [`CHUNK_BYTES`]).
    chunk_lines: u64,
    /// Lines that may wait for the writer (the configured `buffer`).
    queue_limit: u64,
    /// The room a fresh buffer starts with.
    chunk_capacity: usize,
    shared: Arc<Shared>,
    sender: Option<SyncSender<Chunk>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl AccessLog {
    /// Starts the writer thread, which opens the file (a bad path fails here, at start).
    pub(crate) fn open(config: &AccessLogConfig) -> anyhow::Result<AccessLog> {
        let queue_limit = config.buffer.max(1) as u64;
        let chunk_lines = queue_limit.min(CHUNK_BYTES as u64);
        // A line is rarely longer than 512 bytes; the last one may pass the mark.
        let chunk_capacity = (chunk_lines as usize * 512).min(CHUNK_BYTES) + 4096;
        let fallback = Arc::new(Slot::new(0));
        let shared = Arc::new(Shared {
            slots: Mutex::new(vec![Arc::clone(&fallback)]),
            fallback,
            queued: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            reopen: AtomicBool::new(false),
            spare_buffers: Mutex::new(Vec::new()),
        });
        // Each chunk holds a line at least, so `queue_limit` chunks bound the channel too.
        let (sender, receiver) = sync_channel(config.buffer.clamp(1, 1024));
        let (opened_sender, opened) = sync_channel(1);
        let writer = {
            let shared = Arc::clone(&shared);
            let path = config.path.clone();
            std::thread::Builder::new()
                .name("capstan-access-log".into())
                .spawn(move || {
                    own_descriptor_table();
                    match Sink::open(&path) {
                        Ok(sink) => {
                            let _ = opened_sender.send(Ok(()));
                            Writer::new(sink, shared, chunk_capacity).run(&receiver);
                        }
                        Err(e) => {
                            let _ = opened_sender.send(Err(e));
                        }
                    }
                })?
        };
        opened
            .recv()
            .map_err(|_| anyhow::anyhow!("access log: the writer thread did not start"))??;
        Ok(AccessLog {
            id: NEXT_LOG_ID.fetch_add(1, Ordering::Relaxed),
            format: config.format,
            sample: config.sample,
            seen: AtomicU64::new(0),
            chunk_lines,
            queue_limit,
            chunk_capacity,
            shared,
            sender: Some(sender),
            writer: Some(writer),
        })
    }

    /// Whether the next request is one of those logged.
    pub(crate) fn sampled(&self) -> bool {
        self.sample <= 1
            || self
                .seen
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(self.sample)
    }

    /// Formats the record's line into this thread's buffer; never waits for the disk.
    pub(crate) fn log(&self, record: &Record) {
        self.append(|line| with_dates(|dates| format_record(record, self.format, dates, line)));
    }

    /// Logs a Common or Combined line whose request part (up to the status) and rest (after
    /// the byte count, with the line break) were formatted when the request head arrived.
    pub(crate) fn log_text(&self, request_part: &[u8], status: u16, bytes: u64, rest: &[u8]) {
        self.append(|line| {
            line.extend_from_slice(request_part);
            push_response_part(line, status, bytes);
            line.extend_from_slice(rest);
        });
    }

    /// Appends one line, written by `write`, to this thread's buffer.
    fn append(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let mut write = Some(write);
        let _ = SLOTS.try_with(|slots| {
            let mut slots = slots.borrow_mut();
            let write = write.take().expect("called once");
            self.append_to(self.slot_of_this_thread(&mut slots), write);
        });
        if let Some(write) = write {
            self.append_to(&self.shared.fallback, write);
        }
    }

    fn slot_of_this_thread<'s>(&self, slots: &'s mut Vec<(u64, Arc<Slot>)>) -> &'s Slot {
        if let Some(i) = slots.iter().position(|(id, _)| *id == self.id) {
            return &slots[i].1;
        }
        // This thread's first line in this log: forget the slots of logs closed since.
        slots.retain(|(_, slot)| !slot.closed.load(Ordering::Relaxed));
        let slot = Arc::new(Slot::new(self.chunk_capacity));
        lock(&self.shared.slots).push(Arc::clone(&slot));
        slots.push((self.id, slot));
        &slots[slots.len() - 1].1
    }

    fn append_to(&self, slot: &Slot, write: impl FnOnce(&mut Vec<u8>)) {
        let mut chunk = lock(&slot.chunk);
        let chunk = &mut *chunk;
        write(&mut chunk.bytes);
        chunk.lines += 1;
        if chunk.bytes.len() >= CHUNK_BYTES || chunk.lines >= self.chunk_lines {
            let fresh = Chunk {
                bytes: self.shared.empty_buffer(self.chunk_capacity),
                lines: 0,
            };
            // Still under the slot's lock: the writer's sweep, which takes the lock, then
            // finds this chunk in the channel and writes it before the lines that follow.
            self.hand_over(std::mem::replace(chunk, fresh));
        }
    }

    /// Sends a full buffer to the writer, or drops its lines (counted) when too many wait.
    fn hand_over(&self, chunk: Chunk) {
        let lines = chunk.lines;
        let queued = self.shared.queued.fetch_add(lines, Ordering::Relaxed) + lines;
        let sent = queued <= self.queue_limit
            && self
                .sender
                .as_ref()
                .is_some_and(|sender| sender.try_send(chunk).is_ok());
        if sent {
            self.shared.handed_over.fetch_add(1, Ordering::Relaxed);
        } else {
            self.shared.queued.fetch_sub(lines, Ordering::Relaxed);
            self.shared.dropped.fetch_add(lines, Ordering::Relaxed);
        }
    }

    /// Asks the writer to reopen its file (after logrotate renamed it).
    pub(crate) fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Full buffers the threads have handed to the writer (one channel send each; buffers
    /// that were not full are taken by the writer without one).
    pub fn handed_over(&self) -> u64 {
        self.shared.handed_over.load(Ordering::Relaxed)
    }
}

impl Drop for AccessLog {
    /// Lets the writer write what is queued and what every thread holds before the process
    /// goes on to exit. No line can be added meanwhile: adding one needs this log.
    fn drop(&mut self) {
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Gives the writer thread a descriptor table of its own, holding only standard input, output
/// and error, before it opens the log. The workers' table is then theirs alone: with a single
/// worker, the kernel takes its faster path for a descriptor table nobody shares on each of
/// the worker's socket calls (a second thread, even an idle one, cost a one-worker switch about
/// 1 % of its CPU, this in part; BENCHMARKS.md), and the writer holds no client or node socket
/// open. Where the kernel lacks `close_range` (before 5.9) the table stays shared, which costs
/// only that.
pub(crate) fn own_descriptor_table() {
    // SAFETY: `close_range` with `CLOSE_RANGE_UNSHARE` first gives this thread a private copy of
    // the descriptor table, then closes descriptors 3 and up in that copy only: the process's
    // table, which every other thread keeps using, is untouched, and nothing in this new thread
    // owns any of the closed descriptors (it opens its log file afterwards).
    let rc = unsafe {
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_UNSHARE as libc::c_int,
        )
    };
    if rc != 0 {
        tracing::debug!(
            "access log: writer shares the descriptor table: {}",
            io::Error::last_os_error()
        );
    }
}

/// Where lines go. Chunks are large already, so nothing is buffered in between.
pub(crate) enum Sink {
    Stdout(io::Stdout),
    File { path: PathBuf, file: File },
}

impl Sink {
    fn open(path: &str) -> anyhow::Result<Sink> {
        if path == "-" {
            return Ok(Sink::Stdout(io::stdout()));
        }
        let path = PathBuf::from(path);
        let file = open_append(&path)
            .map_err(|e| anyhow::anyhow!("access_log.path: cannot open {}: {e}", path.display()))?;
        Ok(Sink::File { path, file })
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => {
                let mut out = out.lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Sink::File { file, .. } => file.write_all(bytes),
        }
    }

    /// Opens the path anew; on failure the old file keeps being written.
    fn reopen(&mut self) {
        let Sink::File { path, file } = self else {
            return;
        };
        match open_append(path) {
            Ok(reopened) => *file = reopened,
            Err(e) => tracing::error!(
                "access log: cannot reopen {}: {e}; still writing the old file",
                path.display()
            ),
        }
    }
}

pub(crate) fn open_append(path: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// The writer thread: writes full buffers as they come and sweeps every thread's buffer each
/// [`FLUSH_INTERVAL`]. It blocks on the channel, which wakes it once per full buffer (not per
/// request: one futex call for some hundred lines).
pub(crate) struct Writer {
    sink: Sink,
    shared: Arc<Shared>,
    failed: bool,
    /// Chunks taken in a sweep, written once no lock is held (kept for its capacity).
    taken: Vec<Chunk>,
    chunk_capacity: usize,
}

impl Writer {
    fn new(sink: Sink, shared: Arc<Shared>, chunk_capacity: usize) -> Writer {
        Writer {
            sink,
            shared,
            failed: false,
            taken: Vec::new(),
            chunk_capacity,
        }
    }

    /// Until every sender is gone (the log dropped); then a last sweep.
    fn run(mut self, receiver: &Receiver<Chunk>) {
        let mut next_sweep = Instant::now() + FLUSH_INTERVAL;
        loop {
            if self.shared.reopen.swap(false, Ordering::Relaxed) {
                self.sink.reopen();
            }
            match receiver.recv_timeout(next_sweep.saturating_duration_since(Instant::now())) {
                Ok(chunk) => {
                    self.shared.queued.fetch_sub(chunk.lines, Ordering::Relaxed);
                    self.write(chunk);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.sweep(receiver, true);
                    return;
                }
            }
            if Instant::now() >= next_sweep {
                self.sweep(receiver, false);
                next_sweep = Instant::now() + FLUSH_INTERVAL;
            }
        }
    }

    /// Takes what every thread holds and writes it; `closing` marks the slots closed.
    fn sweep(&mut self, receiver: &Receiver<Chunk>, closing: bool) {
        // Workers take the list's lock only to add their slot, once per thread.
        let mut slots = lock(&self.shared.slots);
        for slot in slots.iter() {
            let mut chunk = lock(&slot.chunk);
            // A chunk this thread handed over is in the channel by now (it sends under this
            // lock): it goes first, so that each thread's lines stay in order.
            while let Ok(chunk) = receiver.try_recv() {
                self.shared.queued.fetch_sub(chunk.lines, Ordering::Relaxed);
                self.taken.push(chunk);
            }
            if chunk.lines > 0 {
                let bytes = self.shared.empty_buffer(self.chunk_capacity);
                let fresh = Chunk { bytes, lines: 0 };
                self.taken.push(std::mem::replace(&mut *chunk, fresh));
            }
            if closing {
                slot.closed.store(true, Ordering::Relaxed);
            }
        }
        // A slot only the list holds belongs to a thread that has exited (emptied just now).
        slots.retain(|slot| Arc::strong_count(slot) > 1);
        drop(slots);
        // Written with no lock held: the disk never makes a worker wait.
        let mut taken = std::mem::take(&mut self.taken);
        for chunk in taken.drain(..) {
            self.write(chunk);
        }
        self.taken = taken;
    }

    fn write(&mut self, chunk: Chunk) {
        match self.sink.write_all(&chunk.bytes) {
            Ok(()) => {
                self.shared
                    .written
                    .fetch_add(chunk.lines, Ordering::Relaxed);
                self.failed = false;
            }
            Err(e) if !self.failed => {
                tracing::error!("access log: write failed: {e}");
                self.failed = true;
            }
            Err(_) => {}
        }
        self.shared.give_back(chunk.bytes);
    }
}

/// The current second's dates, formatted once: `10/Oct/2000:13:55:36 +0000` (CLF) and
/// `2000-10-10T13:55:36` (ISO 8601, for JSON, to which the milliseconds are added).
#[derive(Default)]
pub(crate) struct DateCache {
    /// The second the dates are of, from its start to the next one's (compared as they are:
    /// cheaper than taking the seconds since the epoch of every request's time).
    second: Option<(SystemTime, SystemTime)>,
    clf: Vec<u8>,
    iso: Vec<u8>,
}

impl DateCache {
    fn refresh(&mut self, time: SystemTime) {
        if let Some((start, end)) = self.second {
            if start <= time && time < end {
                return;
            }
        }
        let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let start = UNIX_EPOCH + Duration::from_secs(secs);
        let secs = secs as i64;
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        let rem = secs.rem_euclid(86_400);
        let (hour, minute, second) = (rem / 3600, rem / 60 % 60, rem % 60);
        self.clf.clear();
        let _ = write!(
            self.clf,
            "{day:02}/{}/{year:04}:{hour:02}:{minute:02}:{second:02} +0000",
            MONTHS[(month - 1) as usize],
        );
        self.iso.clear();
        let _ = write!(
            self.iso,
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"
        );
        self.second = Some((start, start + Duration::from_secs(1)));
    }

    pub(crate) fn clf(&mut self, time: SystemTime) -> &[u8] {
        self.refresh(time);
        &self.clf
    }

    /// `2026-11-23T07:30:00.123Z`.
    fn push_iso(&mut self, line: &mut Vec<u8>, time: SystemTime) {
        self.refresh(time);
        line.extend_from_slice(&self.iso);
        let millis = time
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_millis();
        let digit = |n: u32| b'0' + (n % 10) as u8;
        line.extend_from_slice(&[
            b'.',
            digit(millis / 100),
            digit(millis / 10),
            digit(millis),
            b'Z',
        ]);
    }
}

/// One line, with its line break, appended to `line`.
pub(crate) fn format_record(
    record: &Record,
    format: LogFormat,
    dates: &mut DateCache,
    line: &mut Vec<u8>,
) {
    match format {
        LogFormat::Common => format_common(record, dates, line),
        LogFormat::Combined => {
            format_common(record, dates, line);
            push_combined_part(line, text(&record.referer), text(&record.user_agent));
        }
        LogFormat::Json => format_json(record, dates, line),
    }
    line.push(b'\n');
}

pub(crate) fn format_common(r: &Record, dates: &mut DateCache, line: &mut Vec<u8>) {
    push_quoted(line, Some(r.client.as_bytes()));
    push_request_part(line, dates.clf(r.time), &r.method, &r.uri, r.version);
    push_response_part(line, r.status, r.bytes);
}

/// A Common line from after the client to its status: ` - - [date] "method target version" `.
pub(crate) fn push_request_part(
    line: &mut Vec<u8>,
    date: &[u8],
    method: &Method,
    uri: &Uri,
    version: Version,
) {
    line.extend_from_slice(b" - - [");
    line.extend_from_slice(date);
    line.extend_from_slice(b"] \"");
    line.extend_from_slice(method.as_str().as_bytes());
    line.push(b' ');
    push_target(line, uri);
    line.push(b' ');
    line.extend_from_slice(version_name(version));
    line.extend_from_slice(b"\" ");
}

/// `status bytes` (`-` for no bytes), the part of a Common line known only at the end.
pub(crate) fn push_response_part(line: &mut Vec<u8>, status: u16, bytes: u64) {
    if (100..1000).contains(&status) {
        // Every status hyper lets through has three digits.
        let digit = |n: u16| b'0' + (n % 10) as u8;
        line.extend_from_slice(&[digit(status / 100), digit(status / 10), digit(status), b' ']);
    } else {
        push_number(line, status);
        line.push(b' ');
    }
    if bytes == 0 {
        line.push(b'-');
    } else {
        push_number(line, bytes);
    }
}

/// What Combined adds to Common: ` "referer" "user-agent"`.
pub(crate) fn push_combined_part(
    line: &mut Vec<u8>,
    referer: Option<&[u8]>,
    user_agent: Option<&[u8]>,
) {
    line.extend_from_slice(b" \"");
    push_quoted(line, referer);
    line.extend_from_slice(b"\" \"");
    push_quoted(line, user_agent);
    line.push(b'"');
}

/// `HTTP/1.1`, as `Version`'s `Debug` writes it.
pub(crate) fn version_name(version: Version) -> &'static [u8] {
    match version {
        Version::HTTP_09 => b"HTTP/0.9",
        Version::HTTP_10 => b"HTTP/1.0",
        Version::HTTP_11 => b"HTTP/1.1",
        Version::HTTP_2 => b"HTTP/2.0",
        Version::HTTP_3 => b"HTTP/3.0",
        _ => b"HTTP/?",
    }
}

/// A number in decimal, without `fmt`'s machinery (it is on every logged request's path).
pub(crate) fn push_number(line: &mut Vec<u8>, n: impl itoa::Integer) {
    line.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

pub(crate) const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// The request target as the client sent it, with anything that could break the line's
/// fields (space, quote, backslash, control or non-ASCII bytes) percent-encoded.
pub(crate) fn push_target(line: &mut Vec<u8>, uri: &Uri) {
    // A `CONNECT` target is an authority alone; every other has a path.
    let target = match (uri.path_and_query(), uri.authority()) {
        (Some(pq), _) => pq.as_str(),
        (None, Some(authority)) => authority.as_str(),
        (None, None) => "/",
    };
    // Nearly every target needs no escaping: one copy.
    if all_plain(target.as_bytes(), b'!') {
        line.extend_from_slice(target.as_bytes());
        return;
    }
    for b in target.bytes() {
        if is_plain(b, b'!') {
            line.push(b);
        } else {
            line.extend_from_slice(&[
                b'%',
                HEX_UPPER[usize::from(b >> 4)],
                HEX_UPPER[usize::from(b & 15)],
            ]);
        }
    }
}

/// A byte a field may hold as it is: printable ASCII from `low` (a space is allowed in a quoted
/// field, not in the target), but for the quote and the backslash.
pub(crate) fn is_plain(b: u8, low: u8) -> bool {
    (b >= low) & (b <= b'~') & (b != b'"') & (b != b'\\')
}

/// Whether every byte [`is_plain`], eight at a time in a `u64` (the last eight overlapping the
/// ones before when the length is not a multiple of eight); a shorter field byte by byte.
pub(crate) fn all_plain(bytes: &[u8], low: u8) -> bool {
    let Some(last) = bytes.len().checked_sub(8) else {
        return bytes.iter().all(|&b| is_plain(b, low));
    };
    let word = |eight: &[u8]| u64::from_le_bytes(eight.try_into().expect("8 bytes"));
    let mut bad = not_plain_bytes(word(&bytes[last..]), low);
    for eight in bytes.chunks_exact(8) {
        bad |= not_plain_bytes(word(eight), low);
    }
    bad == 0
}

/// Not zero when a byte of `word` is not [`is_plain`]. Once no byte has its top bit set (the
/// first term), each further term is exact, as carries and borrows between bytes start only
/// at a byte that is out of range (the tests of Anderson's "Bit Twiddling Hacks").
pub(crate) fn not_plain_bytes(word: u64, low: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & TOPS;
    let above_ascii = word & TOPS;
    let below_low = word.wrapping_sub(ONES * u64::from(low)) & TOPS;
    let delete = word.wrapping_add(ONES) & TOPS;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    above_ascii | below_low | delete | quote | backslash
}

/// A header value inside a quoted field, escaped as Apache does (`\"`, `\\`, `\xHH`);
/// `-` when absent.
pub(crate) fn push_quoted(line: &mut Vec<u8>, value: Option<&[u8]>) {
    let Some(value) = value else {
        line.push(b'-');
        return;
    };
    // Nearly every value needs no escaping: one copy.
    if all_plain(value, b' ') {
        line.extend_from_slice(value);
        return;
    }
    for &b in value {
        match b {
            b'"' => line.extend_from_slice(b"\\\""),
            b'\\' => line.extend_from_slice(b"\\\\"),
            b' '..=b'~' => line.push(b),
            _ => line.extend_from_slice(&[
                b'\\',
                b'x',
                HEX_UPPER[usize::from(b >> 4)],
                HEX_UPPER[usize::from(b & 15)],
            ]),
        }
    }
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's algorithm).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A JSON string, escaped by serde_json (quotes, backslashes, control characters).
pub(crate) fn push_json_str(line: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(&mut *line, text);
}

/// A header value as a JSON string (bytes that are not UTF-8 become U+FFFD); `null` when
/// absent.
pub(crate) fn push_json_text(line: &mut Vec<u8>, value: Option<&[u8]>) {
    match value.map(std::str::from_utf8) {
        None => line.extend_from_slice(b"null"),
        Some(Ok(text)) => push_json_str(line, text),
        Some(Err(_)) => push_json_str(line, &String::from_utf8_lossy(value.unwrap_or_default())),
    }
}

/// Milliseconds, rounded to the microsecond, written as serde_json writes a float.
pub(crate) fn push_json_ms(line: &mut Vec<u8>, value: Option<Duration>) {
    match value {
        Some(d) => {
            let _ = serde_json::to_writer(&mut *line, &((d.as_secs_f64() * 1e6).round() / 1e3));
        }
        None => line.extend_from_slice(b"null"),
    }
}

pub(crate) fn text(value: &Option<HeaderValue>) -> Option<&[u8]> {
    value.as_ref().map(HeaderValue::as_bytes)
}

/// One JSON object, keys in the sorted order `serde_json::Value` gave them before lines were
/// written directly (readers that compare lines keep working).
pub(crate) fn format_json(r: &Record, dates: &mut DateCache, line: &mut Vec<u8>) {
    let t = &r.timings;
    line.extend_from_slice(b"{\"bytes\":");
    push_number(line, r.bytes);
    line.extend_from_slice(b",\"cache\":");
    push_json_text(line, text(&r.cache_status));
    line.extend_from_slice(b",\"class\":");
    push_json_text(line, text(&r.class));
    line.extend_from_slice(b",\"client\":");
    push_json_text(line, Some(r.client.as_bytes()));
    match r.client_port {
        Some(port) => {
            line.extend_from_slice(b",\"client_port\":");
            push_number(line, port);
        }
        None => line.extend_from_slice(b",\"client_port\":null"),
    }
    line.extend_from_slice(if r.completed {
        b",\"completed\":true,\"decision\":"
    } else {
        b",\"completed\":false,\"decision\":"
    });
    push_json_str(line, r.decision);
    line.extend_from_slice(b",\"host\":");
    push_json_text(line, text(&r.host));
    line.extend_from_slice(b",\"method\":");
    push_json_str(line, r.method.as_str());
    for (key, value) in [
        (&b",\"ms\":{\"connect\":"[..], t.connect),
        (b",\"dispatch\":", t.dispatch),
        (b",\"end\":", t.end),
        (b",\"first_byte\":", t.first_byte),
        (b",\"sent\":", t.sent),
        (b",\"since_accept\":", t.since_accept),
    ] {
        line.extend_from_slice(key);
        push_json_ms(line, value);
    }
    line.extend_from_slice(b"},\"node\":");
    push_json_text(line, text(&r.node));
    line.extend_from_slice(b",\"referer\":");
    push_json_text(line, text(&r.referer));
    line.extend_from_slice(b",\"status\":");
    push_number(line, r.status);
    line.extend_from_slice(b",\"target\":");
    push_json_target(line, &r.uri);
    line.extend_from_slice(b",\"time\":\"");
    dates.push_iso(line, r.time);
    line.extend_from_slice(b"\",\"user_agent\":");
    push_json_text(line, text(&r.user_agent));
    line.extend_from_slice(b",\"version\":\"");
    line.extend_from_slice(version_name(r.version));
    line.extend_from_slice(b"\"}");
}

/// The target as `Uri` displays it: a path and query (nearly always, written as is) or an
/// absolute URI or authority (from a proxy client or `CONNECT`, displayed into a string).
pub(crate) fn push_json_target(line: &mut Vec<u8>, uri: &Uri) {
    match (uri.scheme(), uri.authority(), uri.path_and_query()) {
        (None, None, Some(pq)) => push_json_str(line, pq.as_str()),
        _ => push_json_str(line, &uri.to_string()),
    }
}

/// What the proxy learns about a logged request while handling it.
#[derive(Default)]
pub(crate) struct Noted {
    pub(crate) class: Option<HeaderValue>,
    pub(crate) node: Option<HeaderValue>,
    pub(crate) decision: Option<&'static str>,
    pub(crate) dispatch: Option<Duration>,
    pub(crate) sent: Option<Duration>,
    pub(crate) connect: Option<Duration>,
    pub(crate) first_byte: Option<Duration>,
}

/// The notes of one logged request, shared with the proxy through a task-local. A mutex rather
/// than atomics, since the class and node are header values: uncontended (the request's own
/// task notes, or the connection it opened), it costs two atomic operations a note and no
/// allocation.
pub(crate) struct Notes {
    pub(crate) start: Instant,
    pub(crate) noted: Mutex<Noted>,
}

tokio::task_local! {
    static NOTES: Arc<Notes>;
}

thread_local! {
    /// Notes of finished requests, for the next ones: in steady state a logged request
    /// allocates no notes.
    static SPARE_NOTES: RefCell<Vec<Arc<Notes>>> = const { RefCell::new(Vec::new()) };
}

/// Spare notes (and spare logged bodies) a thread keeps at most: about as many as it has logged
/// requests in flight.
pub(crate) const MAX_SPARE_NOTES: usize = 64;

impl Notes {
    /// Notes for a request whose head arrived at `start`: a spare one when this thread has one.
    pub(crate) fn fresh(start: Instant) -> Arc<Notes> {
        let spare = SPARE_NOTES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten();
        if let Some(mut notes) = spare {
            if let Some(unshared) = Arc::get_mut(&mut notes) {
                unshared.start = start;
                *unshared
                    .noted
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner) = Noted::default();
                return notes;
            }
        }
        Arc::new(Notes {
            start,
            noted: Mutex::new(Noted::default()),
        })
    }

    /// Keeps finished notes for a later request, unless something still holds them (a cache
    /// fill or a node connection the request started).
    pub(crate) fn recycle(mut notes: Arc<Notes>) {
        if Arc::get_mut(&mut notes).is_none() {
            return;
        }
        let _ = SPARE_NOTES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < MAX_SPARE_NOTES {
                spares.push(notes);
            }
        });
    }

    pub(crate) fn with(&self, note: impl FnOnce(&mut Noted, Duration)) {
        let elapsed = self.start.elapsed();
        if let Ok(mut noted) = self.noted.lock() {
            note(&mut noted, elapsed);
        }
    }
}

pub(crate) fn note(f: impl FnOnce(&mut Noted, Duration)) {
    let _ = NOTES.try_with(|notes| notes.with(f));
}

/// The request's class.
pub(crate) fn note_class(class: &HeaderValue) {
    note(|n, _| n.class = Some(class.clone()));
}

/// The policy picked `node`.
pub(crate) fn note_node(node: &HeaderValue) {
    note(|n, at| {
        n.node = Some(node.clone());
        n.dispatch.get_or_insert(at);
    });
}

/// The request was admitted and handed to a connection to its node.
pub(crate) fn note_sent() {
    note(|n, at| n.sent = Some(at));
}

/// The node's response head arrived.
pub(crate) fn note_first_byte() {
    note(|n, at| n.first_byte = Some(at));
}

/// How the switch answered when it was not by forwarding (`shed`, `no-node`, `redirect`, …).
pub(crate) fn note_decision(decision: &'static str) {
    note(|n, _| n.decision = Some(decision));
}

/// The notes of the request being handled, for something that finishes later (a new node
/// connection being established).
pub(crate) fn current_notes() -> Option<Arc<Notes>> {
    NOTES.try_with(Arc::clone).ok()
}

/// Runs `work` (a task the request started, such as a cache fill) with the request's notes.
pub(crate) async fn with_notes<F: std::future::Future>(
    notes: Option<Arc<Notes>>,
    work: F,
) -> F::Output {
    match notes {
        Some(notes) => NOTES.scope(notes, work).await,
        None => work.await,
    }
}

/// Runs the handling of a request with its notes in reach.
/// Not an `async fn`: that would hold `handling` twice (its argument and the scope).
pub(crate) fn noting<F: std::future::Future>(
    notes: Arc<Notes>,
    handling: F,
) -> tokio::task::futures::TaskLocalFuture<Arc<Notes>, F> {
    NOTES.scope(notes, handling)
}

/// A new connection to the node was established for this request.
pub(crate) fn note_connected(notes: &Notes) {
    notes.with(|n, at| n.connect = Some(at));
}

#[cfg(test)]
mod tests {
    use super::*;
    // The head text and the header pick moved with the logged body (pipeline::response).
    use crate::pipeline::response::{logged_headers, HeadText};
    use http::{header, Request};

    fn record() -> Record {
        Record {
            time: UNIX_EPOCH + Duration::from_secs(971_186_136),
            client: HeaderValue::from_static("127.0.0.1"),
            client_port: Some(5555),
            method: Method::GET,
            uri: "/a%20b?x=1".parse().unwrap(),
            version: Version::HTTP_11,
            host: None,
            referer: None,
            user_agent: Some(HeaderValue::from_static("say \"hi\"")),
            status: 200,
            bytes: 2326,
            completed: true,
            class: None,
            node: None,
            decision: "forward",
            cache_status: None,
            timings: Timings::default(),
        }
    }

    #[test]
    fn combined_line_is_apache_shaped() {
        let mut line = Vec::new();
        format_record(
            &record(),
            LogFormat::Combined,
            &mut DateCache::default(),
            &mut line,
        );
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET /a%20b?x=1 HTTP/1.1\" 200 2326 \
             \"-\" \"say \\\"hi\\\"\"\n"
        );
    }

    #[test]
    fn fields_that_could_break_the_line_are_escaped() {
        let mut r = record();
        r.uri = Uri::try_from(&b"/caf\xc3\xa9?a={b}"[..]).unwrap();
        r.referer = Some(HeaderValue::from_static("http://x/"));
        r.user_agent = Some(HeaderValue::from_bytes(b"a\\b\tc\xe9").unwrap());
        let mut line = Vec::new();
        format_record(
            &r,
            LogFormat::Combined,
            &mut DateCache::default(),
            &mut line,
        );
        let line = String::from_utf8(line).unwrap();
        assert!(
            line.contains(
                "\"GET /caf%C3%A9?a={b} HTTP/1.1\" 200 2326 \"http://x/\" \"a\\\\b\\x09c\\xE9\"\n"
            ),
            "{line}"
        );
    }

    #[test]
    fn only_the_fields_a_format_writes_are_held_the_first_of_repeats() {
        let mut headers = http::HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        headers.append(header::USER_AGENT, HeaderValue::from_static("first"));
        headers.append(header::USER_AGENT, HeaderValue::from_static("second"));
        headers.insert(header::REFERER, HeaderValue::from_static("http://r/"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        let text = |value: Option<&HeaderValue>| value.map(|v| v.to_str().unwrap().to_owned());
        let (host, referer, agent) = logged_headers(&headers, LogFormat::Combined);
        assert_eq!(
            (text(host), text(referer), text(agent)),
            (None, Some("http://r/".into()), Some("first".into()))
        );
        let (host, _, agent) = logged_headers(&headers, LogFormat::Json);
        assert_eq!(
            (text(host), text(agent)),
            (Some("example.com".into()), Some("first".into()))
        );
        assert_eq!(
            logged_headers(&headers, LogFormat::Common),
            (None, None, None)
        );
    }

    /// A line formatted at the head and completed at the end is the line `format_record` gives
    /// for the same request and response.
    #[test]
    fn a_line_formatted_at_the_head_is_the_records_line() {
        let odd_agent = HeaderValue::from_bytes(b"a\\b\tc\xe9 \"q\"").unwrap();
        for format in [LogFormat::Common, LogFormat::Combined] {
            for (target, agent, bytes) in [
                ("/a%20b?x=1", Some(HeaderValue::from_static("curl/8")), 2326),
                ("/caf\u{e9}?a={b}", Some(odd_agent.clone()), 0),
                ("*", None, 17),
            ] {
                let mut r = record();
                r.uri = Uri::try_from(target.as_bytes()).unwrap();
                r.user_agent = agent.clone();
                r.referer = Some(HeaderValue::from_static("http://x/"));
                r.bytes = bytes;
                let mut req = Request::builder().method(Method::GET).uri(r.uri.clone());
                for (name, value) in [(header::REFERER, &r.referer), (header::USER_AGENT, &agent)] {
                    if let Some(value) = value {
                        req = req.header(name, value);
                    }
                }
                let req = req.body(()).unwrap();
                let mut head = HeadText::default();
                head.format(format, r.time, &r.client, &req);
                let mut whole = Vec::new();
                format_record(&r, format, &mut DateCache::default(), &mut whole);
                let mut joined = head.text[..head.split].to_vec();
                push_response_part(&mut joined, r.status, r.bytes);
                joined.extend_from_slice(&head.text[head.split..]);
                assert_eq!(
                    String::from_utf8_lossy(&joined),
                    String::from_utf8_lossy(&whole),
                    "{format:?} {target}"
                );
            }
        }
    }

    #[test]
    fn the_response_part_is_status_then_bytes() {
        for (status, bytes, text) in [
            (100, 0, "100 -"),
            (404, 9, "404 9"),
            (499, 0, "499 -"),
            (999, 12_345_678_901, "999 12345678901"),
            (7, 1, "7 1"),
        ] {
            let mut line = Vec::new();
            push_response_part(&mut line, status, bytes);
            assert_eq!(String::from_utf8(line).unwrap(), text);
        }
    }

    /// The block-wise check agrees with the byte-wise one for every byte at every place.
    #[test]
    fn the_fast_plain_check_is_the_byte_check() {
        for low in [b' ', b'!'] {
            for len in [1, 7, 8, 9, 15, 16, 17, 33] {
                // Plain neighbours at the edges of the range, and beside the excluded bytes.
                for around in [b'a', low, b'~', b'!', b'#', b'[', b']'] {
                    for place in 0..len {
                        for b in 0..=255u8 {
                            let mut bytes = vec![around; len];
                            bytes[place] = b;
                            assert_eq!(
                                all_plain(&bytes, low),
                                is_plain(b, low),
                                "{low} {around} {len} {place} {b}"
                            );
                        }
                    }
                }
            }
        }
        assert!(all_plain(b"", b' '));
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let mut line = Vec::new();
        DateCache::default().push_iso(&mut line, UNIX_EPOCH);
        assert_eq!(line, b"1970-01-01T00:00:00.000Z");
    }

    /// The line as `serde_json::Value` wrote it before lines were written directly.
    fn json_as_a_value(r: &Record) -> String {
        let text = |v: &Option<HeaderValue>| {
            v.as_ref()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
        let t = &r.timings;
        let since = r.time.duration_since(UNIX_EPOCH).unwrap();
        let mut time = Vec::new();
        DateCache::default().push_iso(&mut time, r.time);
        assert!(since.subsec_millis() < 1000);
        serde_json::json!({
            "time": String::from_utf8(time).unwrap(),
            "client": String::from_utf8_lossy(r.client.as_bytes()),
            "client_port": r.client_port,
            "method": r.method.as_str(),
            "target": r.uri.to_string(),
            "version": format!("{:?}", r.version),
            "host": text(&r.host),
            "status": r.status,
            "bytes": r.bytes,
            "completed": r.completed,
            "class": text(&r.class),
            "decision": r.decision,
            "node": text(&r.node),
            "cache": text(&r.cache_status),
            "referer": text(&r.referer),
            "user_agent": text(&r.user_agent),
            "ms": {
                "since_accept": ms(t.since_accept),
                "dispatch": ms(t.dispatch),
                "sent": ms(t.sent),
                "connect": ms(t.connect),
                "first_byte": ms(t.first_byte),
                "end": ms(t.end),
            },
        })
        .to_string()
            + "\n"
    }

    fn json_line(r: &Record) -> String {
        let mut line = Vec::new();
        format_record(r, LogFormat::Json, &mut DateCache::default(), &mut line);
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn json_lines_are_what_serde_json_values_gave() {
        let mut r = record();
        assert_eq!(json_line(&r), json_as_a_value(&r));
        r.time = UNIX_EPOCH + Duration::from_millis(1_763_883_000_042);
        r.client_port = None;
        r.method = Method::from_bytes(b"PURGE").unwrap();
        r.uri = "http://example.org:8080/p?q={x}|y".parse().unwrap();
        r.version = Version::HTTP_2;
        r.host = Some(HeaderValue::from_static("example.org"));
        r.referer = Some(HeaderValue::from_bytes(b"back\\slash\ttab \xE9t\xC3\xA9").unwrap());
        r.class = Some(HeaderValue::from_static("static"));
        r.node = Some(HeaderValue::from_static("a"));
        r.cache_status = Some(HeaderValue::from_static("capstan; hit"));
        r.completed = false;
        r.timings = Timings {
            since_accept: Some(Duration::from_nanos(1_234_567)),
            dispatch: Some(Duration::from_micros(30)),
            sent: Some(Duration::from_secs(2)),
            connect: Some(Duration::ZERO),
            first_byte: Some(Duration::from_nanos(999_999_999)),
            end: Some(Duration::from_secs(86_400)),
        };
        assert_eq!(json_line(&r), json_as_a_value(&r));
        r.uri = "example.org:443".parse().unwrap();
        assert_eq!(json_line(&r), json_as_a_value(&r));
        let parsed: serde_json::Value = serde_json::from_str(&json_line(&r)).unwrap();
        assert_eq!(parsed["referer"], "back\\slash\ttab \u{FFFD}t\u{E9}");
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_bytes() {
        let mut line = Vec::new();
        push_json_str(&mut line, "a\"b\\c\u{1}\n\u{1f}\u{7f}é");
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "\"a\\\"b\\\\c\\u0001\\n\\u001f\u{7f}é\""
        );
    }

    #[test]
    fn dates_follow_the_second() {
        let mut dates = DateCache::default();
        let t = UNIX_EPOCH + Duration::from_secs(971_186_136);
        assert_eq!(dates.clf(t), b"10/Oct/2000:13:55:36 +0000");
        assert_eq!(
            dates.clf(t + Duration::from_millis(999)),
            b"10/Oct/2000:13:55:36 +0000"
        );
        assert_eq!(
            dates.clf(t + Duration::from_secs(24)),
            b"10/Oct/2000:13:56:00 +0000"
        );
        let mut line = Vec::new();
        dates.push_iso(&mut line, t + Duration::from_millis(24_007));
        assert_eq!(line, b"2000-10-10T13:56:00.007Z");
    }

    fn temp_log(name: &str, buffer: usize) -> (std::path::PathBuf, AccessLog) {
        let dir = std::env::temp_dir().join(format!("capstan-alog-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let config = AccessLogConfig {
            path: path.display().to_string(),
            buffer,
            ..AccessLogConfig::default()
        };
        (path.clone(), AccessLog::open(&config).unwrap())
    }

    fn lines_in(path: &std::path::Path) -> usize {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// A thread that logs one line and then nothing reaches the file anyway: the writer takes
    /// its buffer at the next sweep.
    /// The open descriptors of each of this process's threads, by thread name.
    fn descriptors_by_thread() -> Vec<(String, Vec<(u32, std::path::PathBuf)>)> {
        let mut threads = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            let Ok(entries) = std::fs::read_dir(task.join("fd")) else {
                continue; // the thread has just exited
            };
            let fds = entries
                .filter_map(|e| {
                    let e = e.ok()?;
                    let fd = e.file_name().to_str()?.parse().ok()?;
                    Some((fd, std::fs::read_link(e.path()).ok()?))
                })
                .collect();
            threads.push((name.trim().to_string(), fds));
        }
        threads
    }

    #[test]
    fn the_writer_alone_holds_the_log_in_a_descriptor_table_of_its_own() {
        let (path, _log) = temp_log("own-table.log", 16);
        let path = path.canonicalize().unwrap();
        let holders: Vec<_> = descriptors_by_thread()
            .into_iter()
            .filter(|(_, fds)| fds.iter().any(|(_, target)| *target == path))
            .collect();
        assert!(!holders.is_empty(), "no thread holds {}", path.display());
        for (name, fds) in holders {
            assert!(name.starts_with("capstan-access"), "{name} holds the log");
            let others: Vec<_> = fds.iter().filter(|(fd, t)| *fd > 2 && *t != path).collect();
            assert!(others.is_empty(), "the writer holds more: {others:?}");
        }
    }

    #[test]
    fn a_buffer_not_full_reaches_the_file_while_the_log_runs() {
        let (path, log) = temp_log("quiet.log", 16_384);
        log.log(&record());
        wait_for_lines(&path, 1);
        assert_eq!((log.written(), log.handed_over()), (1, 0));
    }

    /// Polls `ready` until it holds, failing after 10 s.
    fn wait_until(what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_for_lines(path: &std::path::Path, n: usize) {
        wait_until(&format!("{n} lines in {path:?}"), || lines_in(path) >= n);
    }

    /// After logrotate renamed the file, `reopen` (SIGUSR1) sends the lines that follow to a
    /// new file at the path; lines written before stay in the renamed one.
    #[test]
    fn reopen_moves_to_a_new_file() {
        let (path, log) = temp_log("rotated.log", 16_384);
        log.log(&record());
        wait_for_lines(&path, 1);
        let rotated = path.with_extension("log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen();
        // The writer reopens within a sweep; a line logged after that lands in the new file.
        wait_until("the file reopened", || path.exists());
        log.log(&record());
        wait_for_lines(&path, 1);
        drop(log);
        assert_eq!((lines_in(&rotated), lines_in(&path)), (1, 1));
    }

    /// Threads that have exited and a thread still running, buffers handed over and not:
    /// everything logged is in the file once the log is dropped, each thread's lines in order.
    #[test]
    fn dropping_the_log_writes_every_threads_lines() {
        let (path, log) = temp_log("drop.log", 16_384);
        let log = Arc::new(log);
        let (logged, all_logged) = std::sync::mpsc::channel::<()>();
        let (exit, may_exit) = std::sync::mpsc::channel::<()>();
        let mut may_exit = Some(may_exit);
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let (log, logged) = (Arc::clone(&log), logged.clone());
                let may_exit = may_exit.take();
                std::thread::spawn(move || {
                    let mut r = record();
                    for i in 0..1_000 {
                        r.uri = format!("/{thread}/{i}").parse().unwrap();
                        log.log(&r);
                    }
                    drop(log);
                    logged.send(()).unwrap();
                    // The first thread outlives the log, its buffer still its own.
                    if let Some(may_exit) = may_exit {
                        let _ = may_exit.recv();
                    }
                })
            })
            .collect();
        for _ in 0..4 {
            all_logged.recv().unwrap();
        }
        assert!(log.handed_over() >= 1, "4,000 lines fill a 64 KiB buffer");
        drop(Arc::into_inner(log).expect("the threads let go"));
        drop(exit);
        for thread in threads {
            thread.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut next = [0; 4];
        for line in text.lines() {
            let target = line.split(' ').nth(6).unwrap();
            let (thread, i) = target[1..].split_once('/').unwrap();
            let thread: usize = thread.parse().unwrap();
            assert_eq!(i.parse::<usize>().unwrap(), next[thread], "{line}");
            next[thread] += 1;
        }
        assert_eq!(next, [1_000; 4]);
    }
}
