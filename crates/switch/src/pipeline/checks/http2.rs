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

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Version};

use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// RFC 9113 §8.2.2 and §8.3.1 for an HTTP/2 request, and the same rules of HTTP/3 (RFC 9114
/// §4.2, §4.3.1: its requests come downgraded the same way); the refusal (400) if it breaks
/// them. Requests of other versions pass untouched.
pub(crate) fn check_request<B>(req: &Request<B>) -> Option<Response<ResponseBody>> {
    if !matches!(req.version(), Version::HTTP_2 | Version::HTTP_3) {
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
}
