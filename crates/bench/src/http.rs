//! A minimal HTTP/1.0 and HTTP/1.1 client: one request at a time per connection, responses read
//! with `httparse`, bodies counted and discarded. Hand-written rather than hyper's client so that
//! connect time and time to first byte are observable and a request costs one write and as few
//! reads as the response needs.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Why a request failed. The names are the keys of `errors` in the JSON result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    ConnectTimeout,
    ConnectRefused,
    ConnectError,
    Reset,
    ReadTimeout,
    /// The server closed the connection before a complete response.
    Closed,
    BadResponse,
    Http4xx,
    Http5xx,
    /// Any other I/O error after the connection was established.
    Io,
    /// TLS handshake or record failure (certificate not trusted, wrong name, bad record).
    Tls,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::ConnectTimeout,
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectError,
        ErrorKind::Reset,
        ErrorKind::ReadTimeout,
        ErrorKind::Closed,
        ErrorKind::BadResponse,
        ErrorKind::Http4xx,
        ErrorKind::Http5xx,
        ErrorKind::Io,
        ErrorKind::Tls,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectError => "connect_error",
            ErrorKind::Reset => "reset",
            ErrorKind::ReadTimeout => "read_timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::Http4xx => "http_4xx",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::Io => "io",
            ErrorKind::Tls => "tls",
        }
    }

    pub(crate) fn from_io(e: &io::Error) -> ErrorKind {
        match e.kind() {
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => ErrorKind::Reset,
            io::ErrorKind::ConnectionAborted => ErrorKind::Reset,
            io::ErrorKind::UnexpectedEof => ErrorKind::Closed,
            // rustls reports its own failures as InvalidData.
            io::ErrorKind::InvalidData => ErrorKind::Tls,
            _ => ErrorKind::Io,
        }
    }
}

/// One non-blocking connect attempt from source address `from` (None: the kernel's choice),
/// abandoned after `timeout` (S-Client: closing the socket aborts the kernel's SYN
/// retransmissions).
pub async fn connect(
    addr: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
) -> Result<TcpStream, ErrorKind> {
    let attempt = async {
        match from {
            None => TcpStream::connect(addr).await,
            Some(ip) => bound_socket(addr, ip)?.connect(addr).await,
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Err(ErrorKind::ConnectTimeout),
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            Err(ErrorKind::ConnectRefused)
        }
        Ok(Err(_)) => Err(ErrorKind::ConnectError),
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
    }
}

/// A socket bound to source address `ip`, its port left for `connect` to choose
/// (`IP_BIND_ADDRESS_NO_PORT`): a port bound before the destination is known could not be shared
/// between destinations, and a busy generator would run out of them.
fn bound_socket(addr: SocketAddr, ip: IpAddr) -> io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: the descriptor is the open socket just made; the option value is a c_int
        // that lives across the call, and its size is passed. A failure only means the port
        // is chosen at bind time.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    socket.bind(SocketAddr::new(ip, 0))?;
    Ok(socket)
}

/// The address and request bytes for following a redirect to `location` (an absolute `http://`
/// URL; a name is resolved). A location the generator cannot follow is a bad response.
pub async fn redirect_request(location: &str) -> Result<(SocketAddr, Vec<u8>), ErrorKind> {
    let rest = location
        .strip_prefix("http://")
        .ok_or(ErrorKind::BadResponse)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(ErrorKind::BadResponse);
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = tokio::net::lookup_host(with_port)
        .await
        .map_err(|_| ErrorKind::ConnectError)?
        .next()
        .ok_or(ErrorKind::ConnectError)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: capstan-bench\r\nConnection: close\r\n\r\n"
    );
    Ok((addr, request.into_bytes()))
}

/// Whether the response says it came from a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMark {
    None,
    Hit,
    Miss,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// When the first byte of the response arrived.
    pub first_byte: Instant,
    pub body_bytes: u64,
    pub cache: CacheMark,
    /// Value of `X-Capstan-Node`.
    pub node: Option<String>,
    /// Media type without parameters.
    pub content_type: Option<String>,
    /// The connection may carry another request.
    pub reusable: bool,
    /// `Location` of a 3xx answer.
    pub location: Option<String>,
}

/// A connection's byte stream: plain TCP or TLS over TCP.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Stream {
        Stream::Plain(s)
    }
}

impl From<TlsStream<TcpStream>> for Stream {
    fn from(s: TlsStream<TcpStream>) -> Stream {
        Stream::Tls(Box::new(s))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An established connection and its read buffer.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data not yet consumed.
    start: usize,
    end: usize,
    /// Which of the run's connection targets it goes to (`BenchConfig::targets`; 0 without).
    pub target: usize,
}

const READ_CHUNK: usize = 16 * 1024;
const MAX_HEAD: usize = 64 * 1024;

enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

impl Conn {
    pub fn new(stream: impl Into<Stream>) -> Conn {
        Conn {
            stream: stream.into(),
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            target: 0,
        }
    }

    async fn fill(&mut self) -> Result<usize, ErrorKind> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Err(ErrorKind::BadResponse);
            }
        }
        let n = self
            .stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|e| ErrorKind::from_io(&e))?;
        self.end += n;
        Ok(n)
    }

    /// Sends `request` and reads the whole response. `head` marks a HEAD request (no body
    /// follows whatever Content-Length says); `keepalive` is what the request asked for.
    pub async fn roundtrip(
        &mut self,
        request: &[u8],
        head: bool,
        keepalive: bool,
    ) -> Result<Response, ErrorKind> {
        self.stream
            .write_all(request)
            .await
            .map_err(|e| ErrorKind::from_io(&e))?;
        if let Stream::Tls(s) = &mut self.stream {
            // rustls may hold encrypted records back until flushed.
            s.flush().await.map_err(|e| ErrorKind::from_io(&e))?;
        }
        self.read_response(head, keepalive).await
    }

    async fn read_response(&mut self, head: bool, keepalive: bool) -> Result<Response, ErrorKind> {
        let mut first_byte = None;
        loop {
            if self.start == self.end && self.fill().await? == 0 {
                return Err(ErrorKind::Closed);
            }
            first_byte.get_or_insert_with(Instant::now);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            let parsed = resp
                .parse(&self.buf[self.start..self.end])
                .map_err(|_| ErrorKind::BadResponse)?;
            let httparse::Status::Complete(head_len) = parsed else {
                if self.fill().await? == 0 {
                    return Err(ErrorKind::Closed);
                }
                continue;
            };
            let status = resp.code.unwrap_or(0);
            let version = resp.version.unwrap_or(0);
            if (100..200).contains(&status) && status != 101 {
                // Interim response (100 Continue, 103 Early Hints): the real one follows.
                self.start += head_len;
                continue;
            }
            let mut body = if version == 0 || !keepalive {
                Body::UntilClose
            } else {
                Body::None
            };
            let mut reusable = version == 1 && keepalive;
            let mut has_length = false;
            let mut cache = CacheMark::None;
            // Weaker signs, used when no X-Cache / Cache-Status says it outright.
            let mut implied = CacheMark::None;
            let mut aged = false;
            let mut node = None;
            let mut content_type = None;
            let mut location = None;
            for h in resp.headers.iter() {
                let name = h.name;
                if name.eq_ignore_ascii_case("content-length") {
                    let v = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .ok_or(ErrorKind::BadResponse)?;
                    if !matches!(body, Body::Chunked) {
                        body = Body::Length(v);
                    }
                    has_length = true;
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    if contains_token(h.value, b"chunked") {
                        body = Body::Chunked;
                    }
                } else if name.eq_ignore_ascii_case("connection") {
                    if contains_token(h.value, b"close") {
                        reusable = false;
                    } else if contains_token(h.value, b"keep-alive") && version == 0 && keepalive {
                        reusable = true;
                    }
                } else if name.eq_ignore_ascii_case("x-cache") {
                    cache = classify_x_cache(h.value);
                } else if name.eq_ignore_ascii_case("cache-status") {
                    cache = classify_cache_status(h.value);
                } else if name.eq_ignore_ascii_case("x-varnish") {
                    implied = classify_x_varnish(h.value);
                } else if name.eq_ignore_ascii_case("via") {
                    if let m @ (CacheMark::Hit | CacheMark::Miss) = classify_ats_via(h.value) {
                        implied = m;
                    }
                } else if name.eq_ignore_ascii_case("age") {
                    aged = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .is_some_and(|a| a > 0);
                } else if name.eq_ignore_ascii_case("location") && (300..400).contains(&status) {
                    location = Some(String::from_utf8_lossy(h.value).into_owned());
                } else if name.eq_ignore_ascii_case("x-capstan-node") {
                    node = Some(String::from_utf8_lossy(h.value).into_owned());
                } else if name.eq_ignore_ascii_case("content-type") {
                    let v = String::from_utf8_lossy(h.value);
                    let t = v
                        .split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase();
                    content_type = Some(t);
                }
            }
            if cache == CacheMark::None {
                cache = match implied {
                    CacheMark::None if aged => CacheMark::Hit,
                    m => m,
                };
            }
            if head || status == 204 || status == 304 {
                body = Body::None;
            } else if !has_length && !matches!(body, Body::Chunked) {
                body = Body::UntilClose;
                reusable = false;
            }
            self.start += head_len;
            let body_bytes = match body {
                Body::None => 0,
                Body::Length(n) => {
                    self.skip(n).await?;
                    n
                }
                Body::Chunked => self.skip_chunked().await?,
                Body::UntilClose => {
                    reusable = false;
                    self.skip_to_eof().await?
                }
            };
            return Ok(Response {
                status,
                first_byte: first_byte.unwrap_or_else(Instant::now),
                body_bytes,
                cache,
                node,
                content_type,
                reusable,
                location,
            });
        }
    }

    async fn skip(&mut self, mut n: u64) -> Result<(), ErrorKind> {
        loop {
            let have = (self.end - self.start) as u64;
            if have >= n {
                self.start += n as usize;
                return Ok(());
            }
            n -= have;
            self.start = self.end;
            if self.fill().await? == 0 {
                return Err(ErrorKind::Closed);
            }
        }
    }

    async fn skip_to_eof(&mut self) -> Result<u64, ErrorKind> {
        let mut total = (self.end - self.start) as u64;
        self.start = self.end;
        loop {
            match self.fill().await {
                Ok(0) => return Ok(total),
                Ok(n) => {
                    total += n as u64;
                    self.start = self.end;
                }
                // A reset after the body (the server closing with unread data) still ends it, and
                // so does a TLS peer closing without close_notify.
                Err(ErrorKind::Reset | ErrorKind::Closed) => return Ok(total),
                Err(e) => return Err(e),
            }
        }
    }

    /// A line ending in CRLF (without it), reading more as needed.
    async fn line(&mut self) -> Result<Vec<u8>, ErrorKind> {
        loop {
            if let Some(p) = self.buf[self.start..self.end]
                .windows(2)
                .position(|w| w == b"\r\n")
            {
                let l = self.buf[self.start..self.start + p].to_vec();
                self.start += p + 2;
                return Ok(l);
            }
            if self.end - self.start > 4096 {
                return Err(ErrorKind::BadResponse);
            }
            if self.fill().await? == 0 {
                return Err(ErrorKind::Closed);
            }
        }
    }

    async fn skip_chunked(&mut self) -> Result<u64, ErrorKind> {
        let mut total = 0u64;
        loop {
            let l = self.line().await?;
            let hex = l.split(|&b| b == b';').next().unwrap_or(&[]);
            let s = std::str::from_utf8(hex).map_err(|_| ErrorKind::BadResponse)?;
            let size = u64::from_str_radix(s.trim(), 16).map_err(|_| ErrorKind::BadResponse)?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.line().await?.is_empty() {}
                return Ok(total);
            }
            self.skip(size).await?;
            total += size;
            if !self.line().await?.is_empty() {
                return Err(ErrorKind::BadResponse);
            }
        }
    }
}

/// Whether a response came from a cache, from its header fields (name, value): `X-Cache` or
/// `Cache-Status` say it outright; else Varnish's, Traffic Server's or a positive `Age` imply it.
/// The HTTP/1 reader applies the same rules as it parses.
pub(crate) fn cache_mark<'a>(headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> CacheMark {
    let (mut cache, mut implied, mut aged) = (CacheMark::None, CacheMark::None, false);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("x-cache") {
            cache = classify_x_cache(value);
        } else if name.eq_ignore_ascii_case("cache-status") {
            cache = classify_cache_status(value);
        } else if name.eq_ignore_ascii_case("x-varnish") {
            implied = classify_x_varnish(value);
        } else if name.eq_ignore_ascii_case("via") {
            if let m @ (CacheMark::Hit | CacheMark::Miss) = classify_ats_via(value) {
                implied = m;
            }
        } else if name.eq_ignore_ascii_case("age") {
            aged = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|a| a > 0);
        }
    }
    match (cache, implied) {
        (CacheMark::None, CacheMark::None) if aged => CacheMark::Hit,
        (CacheMark::None, m) => m,
        (c, _) => c,
    }
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// `X-Cache: HIT`, `X-Cache: HIT from proxy`, `MISS`, Varnish's `hit`/`miss`.
fn classify_x_cache(v: &[u8]) -> CacheMark {
    let s = String::from_utf8_lossy(v).to_ascii_lowercase();
    if s.contains("hit") {
        CacheMark::Hit
    } else if s.contains("miss") || s.contains("pass") {
        CacheMark::Miss
    } else {
        CacheMark::None
    }
}

/// Varnish's `X-Varnish: 32770 3` (this request's id and the id of the request that stored
/// the object: a hit) or `X-Varnish: 32770` (a miss or a pass).
fn classify_x_varnish(v: &[u8]) -> CacheMark {
    match String::from_utf8_lossy(v).split_whitespace().count() {
        0 => CacheMark::None,
        1 => CacheMark::Miss,
        _ => CacheMark::Hit,
    }
}

/// Traffic Server's `Via` with `proxy.config.http.insert_response_via_str` ≥ 1:
/// `http/1.1 host (ApacheTrafficServer/9.2.0 [cHs f ])`; the letter after the first `c` in the
/// brackets is the cache lookup result — `H` fresh hit, `R` fresh RAM hit; `M` miss, `S` stale,
/// `A` not acceptable, ` ` no lookup.
fn classify_ats_via(v: &[u8]) -> CacheMark {
    let s = String::from_utf8_lossy(v);
    let Some(codes) = s.rsplit_once('[').map(|(_, c)| c) else {
        return CacheMark::None;
    };
    let b = codes.as_bytes();
    match b.iter().position(|&c| c == b'c').and_then(|i| b.get(i + 1)) {
        Some(b'H' | b'R') => CacheMark::Hit,
        Some(b'M' | b'S' | b'A' | b' ') => CacheMark::Miss,
        _ => CacheMark::None,
    }
}

/// RFC 9211 `Cache-Status: ExampleCache; hit` or `...; fwd=miss`; the last (closest to the
/// client) cache decides. `fwd=…; collapsed` is a hit: the request waited for another one's
/// fetch and never reached the origin itself — as Polygraph counts hits at the server, and as
/// Varnish (a waiting-list request finds `obj.hits > 0`) and Traffic Server (read-while-writer)
/// report theirs.
fn classify_cache_status(v: &[u8]) -> CacheMark {
    let s = String::from_utf8_lossy(v).to_ascii_lowercase();
    let Some(last) = s.split(',').next_back() else {
        return CacheMark::None;
    };
    let params: Vec<&str> = last.split(';').skip(1).map(str::trim).collect();
    if params.contains(&"hit") || params.contains(&"collapsed") {
        CacheMark::Hit
    } else if params.iter().any(|p| p.starts_with("fwd")) {
        CacheMark::Miss
    } else {
        CacheMark::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_headers() {
        assert_eq!(classify_x_cache(b"HIT from squid"), CacheMark::Hit);
        assert_eq!(classify_x_cache(b"MISS"), CacheMark::Miss);
        assert_eq!(
            classify_cache_status(b"Origin; fwd=miss, Capstan; hit"),
            CacheMark::Hit
        );
        assert_eq!(
            classify_cache_status(b"Capstan; fwd=uri-miss; stored"),
            CacheMark::Miss
        );
        assert_eq!(
            classify_cache_status(b"Capstan; fwd=uri-miss; fwd-status=200; collapsed"),
            CacheMark::Hit
        );
        assert!(contains_token(b"keep-alive, Close", b"close"));
        assert_eq!(classify_x_varnish(b"32770 3"), CacheMark::Hit);
        assert_eq!(classify_x_varnish(b"32770"), CacheMark::Miss);
        assert_eq!(
            classify_ats_via(b"http/1.1 h (ApacheTrafficServer/9.2.0 [cHs f ])"),
            CacheMark::Hit
        );
        assert_eq!(
            classify_ats_via(b"http/1.1 h (ApacheTrafficServer/9.2.0 [uScRs f p eN:t cCHp s ])"),
            CacheMark::Hit
        );
        assert_eq!(
            classify_ats_via(b"http/1.1 h (ApacheTrafficServer/9.2.0 [cMsSf ])"),
            CacheMark::Miss
        );
        assert_eq!(classify_ats_via(b"1.1 capstan"), CacheMark::None);
    }
}
