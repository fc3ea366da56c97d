//! HTTP/1.1 to a node for a request without a body, run in the request's own task.
//!
//! hyper's client runs each node connection in a task of its own and hands it every request
//! through a channel: per request a send, a wake-up of that task, the response back through a
//! oneshot, another wake-up. For the requests that carry no body (most of a web site's) the
//! switch writes the head and reads the answer itself, in the task that already waits for it,
//! as Pingora does: no channel, no second task. `httparse` parses the head; the body is
//! delimited here by RFC 9112 §6.3 (no body, Content-Length, chunked, or until the node
//! closes); interim (1xx) heads before the response go to the caller's [`OnInterim`], their
//! fields made only then. The connection goes back to its pool ([`crate::upstream::pool`]) the
//! moment its response has been read whole. Requests with a body, upgrades and HTTP/2 nodes
//! keep going through hyper.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use crate::net::node_clock::NodeClock;
use crate::net::BoxError;
use crate::upstream::tls::NodeStream;

/// Header fields a response head may carry, as hyper allows.
const MAX_HEADERS: usize = 100;
/// The largest response head (or trailer section) read before giving up, hyper's default.
const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// A chunk-size line longer than this is not a chunk size.
const MAX_CHUNK_LINE: usize = 1024;
/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 16 * 1024;

/// Where the informational (1xx) heads before a response go as they are read (the request's
/// way to its client, see `crate::pipeline::interim`); their fields are made only for it.
pub(crate) type OnInterim<'a> = &'a (dyn Fn(StatusCode, HeaderMap) + Sync);

/// A connection to an HTTP/1.1 node, with the bytes read from it and not yet used.
pub(crate) struct H1Conn {
    io: NodeStream,
    buf: BytesMut,
}

/// Why a node's response could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeReplyError {
    #[error("node closed the connection without answering")]
    Closed,
    #[error("node closed the connection before a whole response head")]
    HeadCut,
    #[error("node sent a malformed response head: {0}")]
    Malformed(String),
    #[error("node's response head exceeds {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("node's response body was cut short")]
    BodyCut,
    #[error("node sent a malformed chunked body: {0}")]
    Chunked(&'static str),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl NodeReplyError {
    /// The node closed or reset the connection before a whole response head: as hyper's
    /// "incomplete message", the request may be repeated if it is idempotent.
    pub(crate) fn is_empty_reply(&self) -> bool {
        match self {
            NodeReplyError::Closed | NodeReplyError::HeadCut => true,
            NodeReplyError::Io(e) => is_reset(e),
            _ => false,
        }
    }

    /// The node took nothing of the request: it had closed the connection (the write failed,
    /// or it closed without a byte of answer).
    pub(crate) fn never_taken(&self) -> bool {
        match self {
            NodeReplyError::Closed => true,
            NodeReplyError::Io(e) => is_reset(e),
            _ => false,
        }
    }
}

/// The peer reset or aborted the connection, or it broke under a write.
pub(crate) fn is_reset(e: &io::Error) -> bool {
    use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: HEAD, 204, 304, `Content-Length: 0`.
    Empty,
    Length(u64),
    Chunked,
    /// Until the node closes: the connection cannot be reused.
    Close,
}

/// A response head as read from a node.
pub(crate) struct Head {
    pub parts: http::response::Parts,
    pub framing: Framing,
    /// Whether the connection may carry another request once the body is read.
    pub reusable: bool,
}

impl H1Conn {
    pub(crate) fn new(io: NodeStream) -> H1Conn {
        H1Conn {
            io,
            buf: BytesMut::new(),
        }
    }

    pub(crate) fn clock(&self) -> Option<&Arc<NodeClock>> {
        self.io.clock()
    }

    /// Whether an idle connection can take a request: nothing arrived on it, and the node has
    /// not closed it. (A read that would block leaves no trace; anything else ends it.)
    pub(crate) fn is_usable(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        let mut read = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut read),
            Poll::Pending
        )
    }

    /// Lets go of the read buffer while the connection waits in the pool, as hyper (patched)
    /// does for idle client connections: an idle connection holds no buffer.
    pub(crate) fn release_buffer(&mut self) {
        self.buf = BytesMut::new();
    }

    /// Writes a request head (see [`encode_head`]).
    pub(crate) async fn send(&mut self, head: &[u8]) -> io::Result<()> {
        self.io.write_all(head).await?;
        self.io.flush().await
    }

    /// Reads the response head to a `method` request; informational (1xx) ones before it go to
    /// `interim`.
    pub(crate) async fn read_head(
        &mut self,
        method: &Method,
        interim: OnInterim<'_>,
    ) -> Result<Head, NodeReplyError> {
        loop {
            if let Some(head) = parse_head(&mut self.buf, method, Some(interim))? {
                return Ok(head);
            }
            if self.buf.len() >= MAX_HEAD_BYTES {
                return Err(NodeReplyError::TooLarge);
            }
            if std::future::poll_fn(|cx| self.poll_fill(cx)).await? == 0 {
                return Err(if self.buf.is_empty() {
                    NodeReplyError::Closed
                } else {
                    NodeReplyError::HeadCut
                });
            }
        }
    }

    /// Reads what the node has sent into the buffer; `Ok(0)`: it closed.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf.reserve(READ_CHUNK);
        let spare = self.buf.spare_capacity_mut();
        let mut read = ReadBuf::uninit(spare);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        let len = self.buf.len();
        // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
        unsafe { self.buf.set_len(len + n) };
        Poll::Ready(Ok(n))
    }
}

/// The head of a request without a body from its parts: `target` in origin form, the fields
/// of `headers` and then `added`, which replace any field of the same name in `headers`.
/// Borrowing the fields lets a request that may be retried keep them for the retry.
pub(crate) fn encode_head(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    added: &[(&HeaderName, &HeaderValue)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + target.len() + (headers.len() + added.len()) * 32);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut push = |name: &HeaderName, value: &HeaderValue| {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    for (name, value) in headers {
        // A body this request does not have is never announced as chunked.
        if name == header::TRANSFER_ENCODING || added.iter().any(|(added, _)| *added == name) {
            continue;
        }
        push(name, value);
    }
    for (name, value) in added {
        push(name, value);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A whole response head from the start of `buf` (taken out of it), `None` if more bytes are
/// needed. Informational responses before it go to `interim` (dropped without one).
fn parse_head(
    buf: &mut BytesMut,
    method: &Method,
    interim: Option<OnInterim<'_>>,
) -> Result<Option<Head>, NodeReplyError> {
    loop {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parser = httparse::ParserConfig::default();
        let len = match parser.parse_response_with_uninit_headers(&mut res, buf, &mut fields) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(NodeReplyError::Malformed(e.to_string())),
        };
        let code = res.code.expect("a complete head has a status");
        let status = StatusCode::from_u16(code)
            .map_err(|_| NodeReplyError::Malformed(format!("status {code}")))?;
        let version = match res.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        };
        let reason = res.reason.filter(|r| Some(*r) != status.canonical_reason());
        let reason = reason.map(|r| Bytes::copy_from_slice(r.as_bytes()));
        // Where each field lies, so the fields can share the head's bytes once they are split
        // off. Left uninitialised: zeroing room for a hundred cost more than parsing the head.
        let mut spans = [const { MaybeUninit::<Span>::uninit() }; MAX_HEADERS];
        let count = res.headers.len();
        for (span, field) in spans.iter_mut().zip(res.headers.iter()) {
            span.write((
                span_of(buf, field.name.as_bytes()),
                span_of(buf, field.value),
            ));
        }
        let block = buf.split_to(len).freeze();
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(NodeReplyError::Malformed(
                    "101 to a request without Upgrade".into(),
                ));
            }
            if let Some(interim) = interim {
                // SAFETY: the loop above wrote the first `count` spans (one per parsed field).
                interim(status, unsafe { fields_of(&block, &spans[..count]) }?);
            }
            continue;
        }
        // SAFETY: the loop above wrote the first `count` spans (one per parsed field).
        let mut headers = unsafe { fields_of(&block, &spans[..count]) }?;
        let (framing, mut reusable) = framing_of(status, method, version, &mut headers)?;
        reusable &= keeps_alive(version, &headers);
        let mut resp = Response::new(());
        *resp.status_mut() = status;
        *resp.version_mut() = version;
        *resp.headers_mut() = headers;
        if let Some(reason) = reason.and_then(|r| hyper::ext::ReasonPhrase::try_from(r).ok()) {
            resp.extensions_mut().insert(reason);
        }
        let (parts, ()) = resp.into_parts();
        return Ok(Some(Head {
            parts,
            framing,
            reusable,
        }));
    }
}

/// A field's name and value: where each lies in the head.
type Span = ((usize, usize), (usize, usize));

/// The fields of a head whose bytes are `block`, where `spans` say.
///
/// # Safety
///
/// Every one of `spans` is initialised, and lies in `block` at a field httparse parsed.
// Inlined: out of line, the final head's fields cost ~90 instructions more per response
// (callgrind, issue 31), for the sake of a second caller (an interim head) that is rare.
#[inline(always)]
unsafe fn fields_of(
    block: &Bytes,
    spans: &[MaybeUninit<Span>],
) -> Result<HeaderMap, NodeReplyError> {
    let mut headers = HeaderMap::with_capacity(spans.len());
    for span in spans {
        // SAFETY: the caller vouches that every span is initialised.
        let (name, value) = unsafe { span.assume_init_read() };
        let name = HeaderName::from_bytes(&block[name.0..name.1])
            .map_err(|_| NodeReplyError::Malformed("invalid field name".into()))?;
        // SAFETY: httparse admits in a field value exactly the bytes a `HeaderValue` may
        // hold (HTAB, 0x20–0x7E, 0x80–0xFF: no CR, LF, NUL or DEL), as hyper relies on, and
        // the span is one of its field values.
        let value =
            unsafe { HeaderValue::from_maybe_shared_unchecked(block.slice(value.0..value.1)) };
        headers.append(name, value);
    }
    Ok(headers)
}

/// Where `part` (a slice of `buf`) lies in it.
fn span_of(buf: &[u8], part: &[u8]) -> (usize, usize) {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    (start, start + part.len())
}

/// How the body of a response is delimited (RFC 9112 §6.3), and whether that leaves the
/// connection reusable. With both Transfer-Encoding and Content-Length, the first wins and the
/// second is removed before the response goes on, as §6.3 requires of a proxy.
fn framing_of(
    status: StatusCode,
    method: &Method,
    version: Version,
    headers: &mut HeaderMap,
) -> Result<(Framing, bool), NodeReplyError> {
    if method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        if version == Version::HTTP_10 {
            return Err(NodeReplyError::Malformed(
                "Transfer-Encoding in an HTTP/1.0 response".into(),
            ));
        }
        let had_length = headers.remove(header::CONTENT_LENGTH).is_some();
        return Ok(if chunked_last(headers) {
            (Framing::Chunked, !had_length)
        } else {
            (Framing::Close, false)
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for item in value.as_bytes().split(|&b| b == b',') {
            let n = parse_length(item.trim_ascii())
                .ok_or_else(|| NodeReplyError::Malformed("invalid Content-Length".into()))?;
            if length.is_some_and(|l| l != n) {
                return Err(NodeReplyError::Malformed(
                    "differing Content-Lengths".into(),
                ));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Framing::Empty, true),
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Whether `chunked` is the last transfer coding.
fn chunked_last(headers: &HeaderMap) -> bool {
    let last = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back();
    last.and_then(|v| v.as_bytes().rsplit(|&b| b == b',').next())
        .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// Whether the node keeps the connection open after this response: HTTP/1.1 without
/// `Connection: close` (an HTTP/1.0 node's connection is not reused).
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && !headers.get_all(header::CONNECTION).iter().any(|v| {
            v.as_bytes()
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
        })
}

/// Where a chunked body's decoding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunks {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes to go.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the last chunk, before the trailer section's end.
    Trailers,
    Done,
}

/// What one step of chunked decoding found.
#[derive(Debug, PartialEq)]
enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    End,
    /// The buffer holds too little to go on.
    More,
}

/// Decodes what `buf` holds of a chunked body (RFC 9112 §7.1), taking it out of `buf`.
fn decode_chunk(state: &mut Chunks, buf: &mut BytesMut) -> Result<Decoded, NodeReplyError> {
    loop {
        match *state {
            Chunks::Size => {
                let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
                    if buf.len() > MAX_CHUNK_LINE {
                        return Err(NodeReplyError::Chunked("chunk-size line too long"));
                    }
                    return Ok(Decoded::More);
                };
                let size = chunk_size(&buf[..=lf])?;
                buf.advance(lf + 1);
                *state = if size == 0 {
                    Chunks::Trailers
                } else {
                    Chunks::Data(size)
                };
            }
            Chunks::Data(left) => {
                if buf.is_empty() {
                    return Ok(Decoded::More);
                }
                let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let data = buf.split_to(take).freeze();
                let left = left - take as u64;
                *state = if left == 0 {
                    Chunks::DataEnd
                } else {
                    Chunks::Data(left)
                };
                return Ok(Decoded::Data(data));
            }
            Chunks::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Decoded::More);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(NodeReplyError::Chunked("chunk data longer than its size"));
                }
                buf.advance(2);
                *state = Chunks::Size;
            }
            Chunks::Trailers => return decode_trailers(state, buf),
            Chunks::Done => return Ok(Decoded::End),
        }
    }
}

/// The size a chunk-size line (ending in LF) gives; chunk extensions are ignored.
fn chunk_size(line: &[u8]) -> Result<u64, NodeReplyError> {
    let line = line
        .strip_suffix(b"\r\n")
        .ok_or(NodeReplyError::Chunked("chunk-size line without CRLF"))?;
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = &line[digits..];
    let extension = rest.trim_ascii_start();
    if digits == 0 || digits > 16 || !(rest.is_empty() || extension.starts_with(b";")) {
        return Err(NodeReplyError::Chunked("invalid chunk size"));
    }
    let hex = std::str::from_utf8(&line[..digits]).expect("hex digits are ASCII");
    u64::from_str_radix(hex, 16).map_err(|_| NodeReplyError::Chunked("invalid chunk size"))
}

/// The trailer section after the last chunk: an empty line, or fields and an empty line.
fn decode_trailers(state: &mut Chunks, buf: &mut BytesMut) -> Result<Decoded, NodeReplyError> {
    if buf.starts_with(b"\r\n") {
        buf.advance(2);
        *state = Chunks::Done;
        return Ok(Decoded::End);
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let len = match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((len, _))) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Ok(Decoded::More),
        Ok(httparse::Status::Partial) => return Err(NodeReplyError::TooLarge),
        Err(_) => return Err(NodeReplyError::Chunked("malformed trailer section")),
    };
    let mut trailers = HeaderMap::new();
    for field in fields.iter().take_while(|f| !f.name.is_empty()) {
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        if let (Ok(name), Ok(value)) = (name, value) {
            trailers.append(name, value);
        }
    }
    buf.advance(len);
    *state = Chunks::Done;
    Ok(Decoded::Trailers(trailers))
}

/// Where a connection goes when its response has been read whole: the pool it came from
/// ([`crate::upstream::pool::Home`]).
pub(crate) trait TakeBack {
    /// Takes `conn` back for another request.
    fn take_back(self, conn: H1Conn);
}

/// A node's response body, read from its connection as the client takes it; `H` is where the
/// connection goes back to.
pub(crate) struct H1Body<H: TakeBack> {
    conn: Option<H1Conn>,
    /// `Empty` once the body has been read whole.
    framing: Framing,
    /// Bytes of a `Length` body still to come.
    left: u64,
    chunks: Chunks,
    reusable: bool,
    home: Option<H>,
}

impl<H: TakeBack> H1Body<H> {
    /// The body `head` announces, read from `conn`. A connection whose body is already whole
    /// (no body) goes home at once.
    pub(crate) fn new(conn: H1Conn, head: &Head, home: H) -> H1Body<H> {
        let mut body = H1Body {
            conn: Some(conn),
            framing: head.framing,
            left: match head.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunks: Chunks::Size,
            reusable: head.reusable,
            home: Some(home),
        };
        if head.framing == Framing::Empty {
            body.finish();
        }
        body
    }

    /// The body has been read whole: its connection goes back to the pool if it can.
    fn finish(&mut self) {
        let (Some(conn), Some(home)) = (self.conn.take(), self.home.take()) else {
            return;
        };
        if self.reusable && conn.buf.is_empty() {
            home.take_back(conn);
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match self.framing {
                Framing::Empty => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Framing::Length(_) if !conn.buf.is_empty() => {
                    let take = conn
                        .buf
                        .len()
                        .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                    let data = conn.buf.split_to(take).freeze();
                    self.left -= take as u64;
                    if self.left == 0 {
                        self.framing = Framing::Empty;
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Framing::Chunked => match decode_chunk(&mut self.chunks, &mut conn.buf)? {
                    Decoded::Data(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Decoded::Trailers(trailers) => {
                        self.framing = Framing::Empty;
                        self.finish();
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Decoded::End => {
                        self.framing = Framing::Empty;
                        continue;
                    }
                    Decoded::More => {}
                },
                Framing::Close if !conn.buf.is_empty() => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Framing::Length(_) | Framing::Close => {}
            }
            if ready!(conn.poll_fill(cx)).map_err(|e| Box::new(e) as BoxError)? == 0 {
                self.conn = None;
                // Only a body delimited by the close ends there.
                return Poll::Ready(match self.framing {
                    Framing::Close => None,
                    _ => Some(Err(Box::new(NodeReplyError::BodyCut))),
                });
            }
        }
    }
}

impl<H: TakeBack + Unpin> Body for H1Body<H> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut().poll_next(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || self.framing == Framing::Empty
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Empty => SizeHint::with_exact(0),
            Framing::Length(_) => SizeHint::with_exact(self.left),
            Framing::Chunked | Framing::Close => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn head_of(text: &str, method: &Method) -> Result<Option<Head>, NodeReplyError> {
        parse_head(&mut BytesMut::from(text), method, None)
    }

    fn framing(text: &str) -> (Framing, bool) {
        let head = head_of(text, &Method::GET).unwrap().expect("a whole head");
        (head.framing, head.reusable)
    }

    #[test]
    fn a_head_is_parsed_and_taken_out_of_the_buffer() {
        let mut buf =
            BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nX-A: 2\r\n\r\nabc");
        let head = parse_head(&mut buf, &Method::GET, None).unwrap().unwrap();
        assert_eq!(head.parts.status, StatusCode::OK);
        assert_eq!(head.parts.headers.get_all("x-a").iter().count(), 2);
        assert_eq!((head.framing, head.reusable), (Framing::Length(3), true));
        assert_eq!(&buf[..], b"abc");
    }

    #[test]
    fn a_partial_head_asks_for_more_and_a_bad_one_is_an_error() {
        assert!(head_of("HTTP/1.1 200 OK\r\nContent-Le", &Method::GET)
            .unwrap()
            .is_none());
        assert!(matches!(
            head_of("HTTP/1.1 2000 OK\r\n\r\n", &Method::GET),
            Err(NodeReplyError::Malformed(_))
        ));
        assert!(matches!(
            head_of("HTTP/1.1 101 Switching Protocols\r\n\r\n", &Method::GET),
            Err(NodeReplyError::Malformed(_))
        ));
    }

    #[test]
    fn field_values_hold_what_a_header_value_may_and_nothing_else() {
        let ok = b"HTTP/1.1 200 OK\r\nX-V: caf\xc3\xa9\tx \r\nContent-Length: 0\r\n\r\n";
        let head = parse_head(&mut BytesMut::from(&ok[..]), &Method::GET, None);
        let value = head.unwrap().unwrap().parts.headers["x-v"].clone();
        assert_eq!(value.as_bytes(), b"caf\xc3\xa9\tx");
        for bad in [&b"X-V: a\x7fb"[..], b"X-V: a\x00b", b"X-V: a\rb"] {
            let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
            text.extend_from_slice(bad);
            text.extend_from_slice(b"\r\n\r\n");
            let parsed = parse_head(&mut BytesMut::from(&text[..]), &Method::GET, None);
            assert!(
                matches!(parsed, Err(NodeReplyError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn informational_responses_are_skipped() {
        let text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        let head = head_of(text, &Method::GET).unwrap().unwrap();
        assert_eq!(head.parts.status, StatusCode::NO_CONTENT);
        assert!(head.parts.headers.is_empty());
    }

    #[test]
    fn a_reason_phrase_of_its_own_is_kept() {
        let head = head_of(
            "HTTP/1.1 200 Fine\r\nContent-Length: 0\r\n\r\n",
            &Method::GET,
        );
        let parts = head.unwrap().unwrap().parts;
        let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
        assert_eq!(reason.as_bytes(), b"Fine");
    }

    #[test]
    fn bodies_are_delimited_as_rfc_9112_says() {
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n"),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n"),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            (Framing::Chunked, true)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
            (Framing::Close, false)
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), (Framing::Close, false));
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: x, close\r\n\r\n"),
            (Framing::Length(5), false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n"),
            (Framing::Length(5), false)
        );
        let head = head_of(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            &Method::HEAD,
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.framing, Framing::Empty);
    }

    #[test]
    fn transfer_encoding_overrides_content_length_which_is_removed() {
        let text = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = head_of(text, &Method::GET).unwrap().unwrap();
        assert_eq!((head.framing, head.reusable), (Framing::Chunked, false));
        assert!(!head.parts.headers.contains_key(header::CONTENT_LENGTH));
    }

    #[test]
    fn bad_or_differing_lengths_are_errors() {
        for bad in ["+5", "5 5", "0x5", "", "5, 6", "99999999999999999999"] {
            let text = format!("HTTP/1.1 200 OK\r\nContent-Length: {bad}\r\n\r\n");
            assert!(
                matches!(
                    head_of(&text, &Method::GET),
                    Err(NodeReplyError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        let te_in_10 = "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(head_of(te_in_10, &Method::GET).is_err());
    }

    /// Decodes `input` fed `step` bytes at a time, as reads may cut it anywhere.
    fn decode_all(
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, Option<HeaderMap>), NodeReplyError> {
        let (mut state, mut buf, mut data, mut fed) =
            (Chunks::Size, BytesMut::new(), Vec::new(), 0);
        loop {
            match decode_chunk(&mut state, &mut buf)? {
                Decoded::Data(bytes) => data.extend_from_slice(&bytes),
                Decoded::Trailers(t) => return Ok((data, Some(t))),
                Decoded::End => return Ok((data, None)),
                Decoded::More if fed < input.len() => {
                    let to = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..to]);
                    fed = to;
                }
                Decoded::More => return Err(NodeReplyError::BodyCut),
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_however_reads_cut_them() {
        let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        for step in [1, 2, 3, 7, body.len()] {
            assert_eq!(
                decode_all(body, step).unwrap(),
                (b"hello, world".to_vec(), None)
            );
        }
        let with_trailers = b"3\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n";
        let (data, trailers) = decode_all(with_trailers, 4).unwrap();
        assert_eq!(data, b"abc");
        assert_eq!(trailers.unwrap()["x-sum"], "9");
    }

    #[test]
    fn malformed_chunks_are_errors() {
        for bad in [
            &b"z\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"5 x\r\nhello\r\n",
        ] {
            assert!(
                decode_all(bad, 3).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let endless = vec![b'1'; MAX_CHUNK_LINE + 2];
        assert!(matches!(
            decode_all(&endless, 64),
            Err(NodeReplyError::Chunked(_))
        ));
    }

    /// Whatever a node sends, parsing and decoding end in a value or an error, never a panic
    /// or a loop: valid answers with bytes flipped, cut or repeated, decoded at every cut.
    #[test]
    fn mangled_answers_never_panic() {
        let answers: [&[u8]; 4] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
            b"HTTP/1.0 304 Not Modified\r\nConnection: keep-alive, close\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 1, 1\r\n\r\nzz",
        ];
        let alphabet = b"\r\n:;, 0123456789abcdefzHTP/\x00\x7f\xff";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..4000 {
            let mut bytes = answers[round % answers.len()].to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % bytes.len().max(1);
                let byte = alphabet[(next() as usize) % alphabet.len()];
                match next() % 3 {
                    0 => {
                        let last = bytes.len() - 1;
                        bytes[at.min(last)] = byte;
                    }
                    1 => bytes.truncate(at),
                    _ => bytes.insert(at, byte),
                }
                if bytes.is_empty() {
                    bytes.push(b'H');
                }
            }
            let mut buf = BytesMut::from(&bytes[..]);
            if let Ok(Some(head)) = parse_head(&mut buf, &Method::GET, None) {
                if head.framing == Framing::Chunked {
                    let rest = buf.to_vec();
                    let _ = decode_all(&rest, 1 + (next() as usize) % 7);
                }
            }
            let _ = decode_all(&bytes, 1 + (next() as usize) % 7);
        }
    }

    #[test]
    fn a_request_head_is_written_in_origin_form_without_transfer_encoding() {
        let req = Request::builder()
            .method(Method::DELETE)
            .uri("/a?b=1")
            .header("host", "n1")
            .header("transfer-encoding", "chunked")
            .header("x-y", "z")
            .body(())
            .unwrap();
        let target = req.uri().path_and_query().unwrap().as_str();
        let head = encode_head(req.method(), target, req.headers(), &[]);
        let head = String::from_utf8(head).unwrap();
        assert_eq!(head, "DELETE /a?b=1 HTTP/1.1\r\nhost: n1\r\nx-y: z\r\n\r\n");
    }
}
