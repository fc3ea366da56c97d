//! HTTP/2 from clients: the `[http2]` settings and the checks an HTTP/2 request passes before
//! it is forwarded to a node as HTTP/1.1.
//!
//! hyper's HTTP/2 server (the `h2` crate) already treats as malformed, and resets with
//! `PROTOCOL_ERROR`, a request with a connection-specific field (`Connection`, `Keep-Alive`,
//! `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, `TE` other than `trailers`), an
//! upper-case field name, a field value with CR, LF or NUL, a pseudo-header after a regular
//! field or repeated, and a body longer or shorter than its `Content-Length` (RFC 9113 §8.1.1,
//! §8.2). What is left to the switch is checked here: `:authority` and `Host` must name the
//! same host (§8.3.1), so the node, which sees only `Host`, reads the request the client meant;
//! and the connection-specific fields are refused again, so no HTTP/2 request can ever carry
//! one into an HTTP/1.1 request head (request smuggling across the downgrade).

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use serde::{Deserialize, Serialize};

use crate::pipeline::dispatch::error_response;
use crate::upstream::body::ResponseBody;

/// `[http2]`: limits of HTTP/2 connections from clients (TLS listeners with ALPN `h2`, and
/// plain listeners with `h2c = true`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http2 {
    /// Streams a client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest header list a client may send, in bytes as HTTP/2 counts them (name + value
    /// + 32 per field; SETTINGS_MAX_HEADER_LIST_SIZE). A larger one resets its stream.
    pub max_header_list_size: u32,
    /// Flow-control window of each stream for request bodies, in bytes.
    pub stream_window: u32,
    /// Flow-control window of the whole connection, in bytes.
    pub connection_window: u32,
    /// Interval of PINGs to an idle client connection; absent: none (the client idle timeout
    /// still closes it).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub keepalive_interval: Option<Duration>,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            // nginx's and HAProxy's default.
            max_concurrent_streams: 100,
            // As `limits.max_header_bytes`.
            max_header_list_size: 32 * 1024,
            stream_window: 1024 * 1024,
            connection_window: 1024 * 1024,
            keepalive_interval: None,
        }
    }
}

/// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

impl Http2 {
    /// The key at fault and what is wrong, for a located error.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_concurrent_streams == 0 {
            return Err((
                "max_concurrent_streams",
                "http2.max_concurrent_streams must be at least 1".into(),
            ));
        }
        if self.max_header_list_size < 1024 {
            return Err((
                "max_header_list_size",
                "http2.max_header_list_size must be at least 1024 bytes".into(),
            ));
        }
        for (key, value) in [
            ("stream_window", self.stream_window),
            ("connection_window", self.connection_window),
        ] {
            if !(65_535..=MAX_WINDOW).contains(&value) {
                return Err((
                    key,
                    format!("http2.{key} must be between 65535 and {MAX_WINDOW} bytes"),
                ));
            }
        }
        Ok(())
    }

    /// A hyper HTTP/2 server builder with these settings.
    pub(crate) fn builder(
        &self,
    ) -> hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor> {
        let mut builder =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_size)
            .initial_stream_window_size(self.stream_window)
            .initial_connection_window_size(self.connection_window)
            .keep_alive_interval(self.keepalive_interval);
        builder
    }
}

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// RFC 9113 §8.2.2 and §8.3.1 for an HTTP/2 request; the refusal (400) if it breaks them.
/// Requests of other versions pass untouched.
pub(crate) fn check_request<B>(req: &Request<B>) -> Option<Response<ResponseBody>> {
    if req.version() != Version::HTTP_2 {
        return None;
    }
    check_fields(req.headers())
        .and_then(|()| check_authority(req))
        .err()
        .map(|cause| error_response(StatusCode::BAD_REQUEST, &cause))
}

fn check_fields(headers: &HeaderMap) -> Result<(), String> {
    for name in [
        &header::CONNECTION,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
    ] {
        if headers.contains_key(name) {
            return Err(format!(
                "connection-specific field `{name}` in an HTTP/2 request"
            ));
        }
    }
    if headers.get_all(header::TE).iter().any(|v| v != "trailers") {
        return Err("TE other than `trailers` in an HTTP/2 request".into());
    }
    Ok(())
}

/// `:authority` and `Host` must agree; one of them must be there (the node needs a Host).
fn check_authority<B>(req: &Request<B>) -> Result<(), String> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host: Option<&HeaderValue> = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host field".into());
    }
    match (req.uri().authority(), host) {
        (Some(authority), Some(host))
            if !authority
                .as_str()
                .eq_ignore_ascii_case(std::str::from_utf8(host.as_bytes()).unwrap_or_default()) =>
        {
            Err(format!(
                ":authority `{authority}` and Host `{}` differ",
                String::from_utf8_lossy(host.as_bytes())
            ))
        }
        (None, None) => Err("HTTP/2 request with neither :authority nor Host".into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h2(uri: &str, fields: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::get(uri).version(Version::HTTP_2);
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn connection_specific_fields_and_authority_mismatch_are_refused() {
        assert!(check_request(&h2("https://a.test/", &[])).is_none());
        assert!(check_request(&h2("https://a.test/", &[("host", "A.test")])).is_none());
        assert!(check_request(&h2("/", &[("host", "a.test")])).is_none());
        assert!(check_request(&h2("/", &[])).is_some());
        assert!(check_request(&h2("https://a.test/", &[("host", "b.test")])).is_some());
        assert!(check_request(&h2("https://a.test/", &[("te", "trailers")])).is_none());
        for field in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
            "te",
        ] {
            let resp = check_request(&h2("https://a.test/", &[(field, "x")])).unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{field}");
        }
        let h1 = Request::get("/")
            .header("connection", "close")
            .body(())
            .unwrap();
        assert!(check_request(&h1).is_none());
    }

    #[test]
    fn settings_are_checked() {
        assert!(Http2::default().check().is_ok());
        let zero = Http2 {
            max_concurrent_streams: 0,
            ..Http2::default()
        };
        assert_eq!(zero.check().unwrap_err().0, "max_concurrent_streams");
        let small = Http2 {
            stream_window: 100,
            ..Http2::default()
        };
        assert_eq!(small.check().unwrap_err().0, "stream_window");
    }
}
