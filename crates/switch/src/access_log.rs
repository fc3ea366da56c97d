//! The access log: one line per request, in Common or Combined Log Format (readable by
//! `capstan bench --replay`) or as JSON lines with the request's timings, class, policy
//! decision, node, status, bytes and cache status.
//!
//! Nothing is formatted or written on the request path. A request that is sampled gathers its
//! facts into a [`Record`] and hands it to a bounded channel; one writer thread wakes every
//! 20 ms, formats what is waiting and writes it through a buffer, flushing after each batch. When the channel is full
//! the record is dropped and counted (`capstan_access_log_dropped_total`) rather than making a
//! worker wait for the disk. `SIGUSR1` asks the writer to reopen the file (logrotate's
//! `postrotate`).
//!
//! What happens deep in the proxy (the class, the node picked, when the request went out and
//! when its head came back) is noted through a task-local [`Notes`], so the proxy's functions
//! need no extra parameters and cost one thread-local lookup when the request is not logged.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::{Body, Frame, SizeHint};
use serde::{Deserialize, Serialize};

use crate::body::{BoxError, ResponseBody};
use crate::server::ConnState;

/// The `[access_log]` section.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessLogConfig {
    /// A file (appended to, created if missing), or `"-"` for standard output.
    pub path: String,
    pub format: LogFormat,
    /// Log one request in `sample` (1: every request).
    pub sample: u64,
    /// Records waiting for the writer at most; past it records are dropped and counted.
    pub buffer: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            path: "-".into(),
            format: LogFormat::Combined,
            sample: 1,
            buffer: 16_384,
        }
    }
}

impl AccessLogConfig {
    /// What the parser cannot check: the key at fault and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.path.trim().is_empty() {
            return Err(("path", "access_log.path must be a file or \"-\"".into()));
        }
        if self.sample == 0 {
            return Err(("sample", "access_log.sample must be at least 1".into()));
        }
        if self.buffer == 0 {
            return Err(("buffer", "access_log.buffer must be at least 1".into()));
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let format = match self.format {
            LogFormat::Common => "common",
            LogFormat::Combined => "combined",
            LogFormat::Json => "json",
        };
        let to = if self.path == "-" {
            "stdout"
        } else {
            &self.path
        };
        format!(
            "log       {format} access log to {to}, 1 request in {}, buffer {} lines\n",
            self.sample, self.buffer
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `host - - [date] "request" status bytes`.
    Common,
    /// Common plus `"referer" "user-agent"` (Apache's and nginx's default).
    Combined,
    /// One JSON object a line, with timings.
    Json,
}

/// When a request's steps happened, relative to the arrival of its head.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
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
pub struct Record {
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

/// The running access log: the channel to the writer thread and its counters.
pub struct AccessLog {
    sample: u64,
    seen: AtomicU64,
    sender: Option<SyncSender<Record>>,
    dropped: AtomicU64,
    written: Arc<AtomicU64>,
    reopen: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl AccessLog {
    /// Opens the file (so that a bad path fails at start) and starts the writer thread.
    pub fn open(config: &AccessLogConfig) -> anyhow::Result<AccessLog> {
        let sink = Sink::open(&config.path)?;
        let (sender, receiver) = sync_channel(config.buffer);
        let written = Arc::new(AtomicU64::new(0));
        let reopen = Arc::new(AtomicBool::new(false));
        let writer = {
            let (written, reopen, format) =
                (Arc::clone(&written), Arc::clone(&reopen), config.format);
            std::thread::Builder::new()
                .name("capstan-access-log".into())
                .spawn(move || write_records(receiver, sink, format, &written, &reopen))?
        };
        Ok(AccessLog {
            sample: config.sample,
            seen: AtomicU64::new(0),
            sender: Some(sender),
            dropped: AtomicU64::new(0),
            written,
            reopen,
            writer: Some(writer),
        })
    }

    /// Whether the next request is one of those logged.
    fn sampled(&self) -> bool {
        self.sample <= 1
            || self
                .seen
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(self.sample)
    }

    /// Hands a record to the writer; never waits.
    pub fn submit(&self, record: Record) {
        let Some(sender) = &self.sender else { return };
        match sender.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Asks the writer to reopen its file (after logrotate renamed it).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Relaxed);
    }

    /// Records dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

impl Drop for AccessLog {
    /// Lets the writer drain what is queued and flush before the process goes on to exit.
    fn drop(&mut self) {
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Where lines go.
enum Sink {
    Stdout(BufWriter<io::Stdout>),
    File { path: PathBuf, out: BufWriter<File> },
}

impl Sink {
    fn open(path: &str) -> anyhow::Result<Sink> {
        if path == "-" {
            return Ok(Sink::Stdout(BufWriter::with_capacity(
                64 * 1024,
                io::stdout(),
            )));
        }
        let path = PathBuf::from(path);
        let file = open_append(&path)
            .map_err(|e| anyhow::anyhow!("access_log.path: cannot open {}: {e}", path.display()))?;
        Ok(Sink::File {
            path,
            out: BufWriter::with_capacity(64 * 1024, file),
        })
    }

    fn out(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(out) => out,
            Sink::File { out, .. } => out,
        }
    }

    /// Opens the path anew; on failure the old file keeps being written.
    fn reopen(&mut self) {
        let Sink::File { path, out } = self else {
            return;
        };
        let _ = out.flush();
        match open_append(path) {
            Ok(file) => *out = BufWriter::with_capacity(64 * 1024, file),
            Err(e) => tracing::error!(
                "access log: cannot reopen {}: {e}; still writing the old file",
                path.display()
            ),
        }
    }
}

fn open_append(path: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// How long the writer sleeps between batches. It polls rather than waits on the channel: a
/// receiver blocked in `recv` would be woken by every request (a futex call and a context
/// switch on the request path, measured at ~20 µs of CPU per request on a loaded machine);
/// a sleeping one is never woken, and drains up to `buffer` records per tick.
const WRITER_TICK: Duration = Duration::from_millis(20);

/// The writer thread: formats and writes records until every sender is gone.
fn write_records(
    receiver: Receiver<Record>,
    mut sink: Sink,
    format: LogFormat,
    written: &AtomicU64,
    reopen: &AtomicBool,
) {
    let mut line = String::with_capacity(512);
    let mut failed = false;
    loop {
        if reopen.swap(false, Ordering::Relaxed) {
            sink.reopen();
        }
        let mut wrote = false;
        let ended = loop {
            let record = match receiver.try_recv() {
                Ok(record) => record,
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            };
            line.clear();
            format_record(&record, format, &mut line);
            match sink.out().write_all(line.as_bytes()) {
                Ok(()) => {
                    written.fetch_add(1, Ordering::Relaxed);
                    (failed, wrote) = (false, true);
                }
                Err(e) if !failed => {
                    tracing::error!("access log: write failed: {e}");
                    failed = true;
                }
                Err(_) => {}
            }
        };
        if wrote || ended {
            let _ = sink.out().flush();
        }
        if ended {
            return;
        }
        std::thread::sleep(WRITER_TICK);
    }
}

/// One line, with its line break.
pub fn format_record(record: &Record, format: LogFormat, line: &mut String) {
    match format {
        LogFormat::Common => format_common(record, line),
        LogFormat::Combined => {
            format_common(record, line);
            line.push_str(" \"");
            push_quoted(line, record.referer.as_ref());
            line.push_str("\" \"");
            push_quoted(line, record.user_agent.as_ref());
            line.push('"');
        }
        LogFormat::Json => format_json(record, line),
    }
    line.push('\n');
}

fn format_common(r: &Record, line: &mut String) {
    use std::fmt::Write as _;
    push_quoted(line, Some(&r.client));
    line.push_str(" - - [");
    push_clf_date(line, r.time);
    let _ = write!(line, "] \"{} ", r.method);
    push_target(line, &r.uri);
    let _ = write!(line, " {:?}\" {} ", r.version, r.status);
    if r.bytes == 0 {
        line.push('-');
    } else {
        let _ = write!(line, "{}", r.bytes);
    }
}

/// The request target as the client sent it, with anything that could break the line's
/// fields (space, quote, backslash, control or non-ASCII bytes) percent-encoded.
fn push_target(line: &mut String, uri: &Uri) {
    // A `CONNECT` target is an authority alone; every other has a path.
    let target = match (uri.path_and_query(), uri.authority()) {
        (Some(pq), _) => pq.as_str(),
        (None, Some(authority)) => authority.as_str(),
        (None, None) => "/",
    };
    for b in target.bytes() {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            line.push(b as char);
        } else {
            line.push_str(&format!("%{b:02X}"));
        }
    }
}

/// A header value inside a quoted field, escaped as Apache does (`\"`, `\\`, `\xHH`);
/// `-` when absent.
fn push_quoted(line: &mut String, value: Option<&HeaderValue>) {
    let Some(value) = value else {
        line.push('-');
        return;
    };
    for &b in value.as_bytes() {
        match b {
            b'"' => line.push_str("\\\""),
            b'\\' => line.push_str("\\\\"),
            b' '..=b'~' => line.push(b as char),
            _ => line.push_str(&format!("\\x{b:02X}")),
        }
    }
}

/// `10/Oct/2000:13:55:36 +0000` (UTC).
fn push_clf_date(line: &mut String, time: SystemTime) {
    use std::fmt::Write as _;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    let _ = write!(
        line,
        "{day:02}/{}/{year:04}:{:02}:{:02}:{:02} +0000",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

/// `2026-11-23T07:30:00.123Z`.
fn iso_time(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
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

fn format_json(r: &Record, line: &mut String) {
    let text = |v: &Option<HeaderValue>| {
        v.as_ref()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
    let t = &r.timings;
    let value = serde_json::json!({
        "time": iso_time(r.time),
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
    });
    line.push_str(&value.to_string());
}

/// What the proxy learns about a logged request while handling it.
#[derive(Default)]
struct Noted {
    class: Option<HeaderValue>,
    node: Option<HeaderValue>,
    decision: Option<&'static str>,
    dispatch: Option<Duration>,
    sent: Option<Duration>,
    connect: Option<Duration>,
    first_byte: Option<Duration>,
}

/// The notes of one logged request, shared with the proxy through a task-local.
pub struct Notes {
    start: Instant,
    noted: Mutex<Noted>,
}

tokio::task_local! {
    static NOTES: Arc<Notes>;
}

impl Notes {
    fn with(&self, note: impl FnOnce(&mut Noted, Duration)) {
        let elapsed = self.start.elapsed();
        if let Ok(mut noted) = self.noted.lock() {
            note(&mut noted, elapsed);
        }
    }
}

fn note(f: impl FnOnce(&mut Noted, Duration)) {
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

/// A new connection to the node was established for this request.
pub(crate) fn note_connected(notes: &Notes) {
    notes.with(|n, at| n.connect = Some(at));
}

/// A request being logged: what its head said, and its notes.
pub struct Pending {
    log: Arc<AccessLog>,
    notes: Arc<Notes>,
    time: SystemTime,
    client: HeaderValue,
    client_port: Option<u16>,
    since_accept: Option<Duration>,
    method: Method,
    uri: Uri,
    version: Version,
    host: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
}

impl Pending {
    /// `Some` when the switch logs and this request is one of the sampled.
    pub fn begin<B>(
        log: Option<&Arc<AccessLog>>,
        conn: &ConnState,
        client: &HeaderValue,
        req: &Request<B>,
    ) -> Option<Pending> {
        let log = log.filter(|log| log.sampled())?;
        let start = Instant::now();
        let headers = req.headers();
        Some(Pending {
            log: Arc::clone(log),
            notes: Arc::new(Notes {
                start,
                noted: Mutex::new(Noted::default()),
            }),
            time: SystemTime::now(),
            client: client.clone(),
            client_port: conn.peer.as_ref().map(|p| p.client.port()),
            since_accept: conn.peer.as_ref().map(|p| start - p.accepted),
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            host: headers.get(header::HOST).cloned(),
            referer: headers.get(header::REFERER).cloned(),
            user_agent: headers.get(header::USER_AGENT).cloned(),
        })
    }

    /// Runs the handling of the request with its notes in reach.
    pub async fn scope<F: std::future::Future>(&self, handling: F) -> F::Output {
        NOTES.scope(Arc::clone(&self.notes), handling).await
    }

    /// Wraps the response so that its line is written when its body ends.
    pub fn attach(self, resp: Response<ResponseBody>) -> Response<ResponseBody> {
        let (parts, body) = resp.into_parts();
        let cache_status = parts.headers.get(&crate::caching::CACHE_STATUS).cloned();
        let logged = LoggedBody {
            expected: body.size_hint().exact(),
            inner: body,
            bytes: 0,
            status: parts.status.as_u16(),
            cache_status,
            pending: Some(self),
        };
        Response::from_parts(parts, ResponseBody::Logged(Box::new(logged)))
    }

    fn finish(self, status: u16, bytes: u64, completed: bool, cache_status: Option<HeaderValue>) {
        let end = self.notes.start.elapsed();
        let noted = match self.notes.noted.lock() {
            Ok(mut noted) => std::mem::take(&mut *noted),
            Err(_) => Noted::default(),
        };
        let decision = noted
            .decision
            .unwrap_or(match (&noted.node, &cache_status) {
                (Some(_), _) => "forward",
                (None, Some(_)) => "cache",
                (None, None) => "switch",
            });
        let record = Record {
            time: self.time,
            client: self.client,
            client_port: self.client_port,
            method: self.method,
            uri: self.uri,
            version: self.version,
            host: self.host,
            referer: self.referer,
            user_agent: self.user_agent,
            status,
            bytes,
            completed,
            class: noted.class,
            node: noted.node,
            decision,
            cache_status,
            timings: Timings {
                since_accept: self.since_accept,
                dispatch: noted.dispatch,
                sent: noted.sent,
                connect: noted.connect,
                first_byte: noted.first_byte,
                end: Some(end),
            },
        };
        self.log.submit(record);
    }
}

/// A response body that counts what it sends and logs the request when it ends (or is
/// dropped unfinished).
pub struct LoggedBody {
    inner: ResponseBody,
    /// The body's length when known at the start: sending that much completes it (hyper does
    /// not poll a body of known length after its last byte).
    expected: Option<u64>,
    bytes: u64,
    status: u16,
    cache_status: Option<HeaderValue>,
    pending: Option<Pending>,
}

impl LoggedBody {
    fn finish(&mut self, completed: bool) {
        if let Some(pending) = self.pending.take() {
            pending.finish(self.status, self.bytes, completed, self.cache_status.take());
        }
    }

    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
                if self.inner.is_end_stream() || self.expected == Some(self.bytes) {
                    self.finish(true);
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Ready(None) => self.finish(true),
            Poll::Pending => {}
        }
        polled
    }

    pub fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    pub fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        let completed = self.inner.is_end_stream() || self.expected == Some(self.bytes);
        self.finish(completed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut line = String::new();
        format_record(&record(), LogFormat::Combined, &mut line);
        assert_eq!(
            line,
            "127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET /a%20b?x=1 HTTP/1.1\" 200 2326 \
             \"-\" \"say \\\"hi\\\"\"\n"
        );
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(iso_time(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }
}
