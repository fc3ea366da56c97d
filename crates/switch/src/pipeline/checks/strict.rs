//! The request rules of RFC 9112 and RFC 9110 that hyper's parser leaves to the application.
//!
//! hyper 1 already answers `400` and closes the connection for whitespace between a field name
//! and its colon, obs-fold, bare CR or NUL in a field, a `Transfer-Encoding` whose final coding
//! is not `chunked` (or any on HTTP/1.0), and an invalid `Content-Length` or several differing
//! ones (`tests/it/strict.rs` pins each). What it accepts and a switch must not forward is checked
//! here: the `Host` field (RFC 9112 §3.2), the absolute-form target (§3.2.2), and transfer
//! codings the switch could not pass on faithfully (§6.1). Every refusal closes the connection,
//! so nothing after a request the switch did not understand is read as a new request.

use http::header::{self, HeaderValue};
use http::uri::Scheme;
use http::{Request, Response, StatusCode, Version};

use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;

/// Checks a request head before anything else looks at it; rewrites `Host` from an
/// absolute-form target. Returns the refusal to send, if any (the connection closes after it).
pub(crate) fn check_request<B>(req: &mut Request<B>) -> Option<Response<ResponseBody>> {
    if let Err(cause) = check_host(req) {
        return Some(refusal(StatusCode::BAD_REQUEST, &cause));
    }
    check_transfer_coding(req.headers())
        .err()
        .map(|cause| refusal(StatusCode::NOT_IMPLEMENTED, &cause))
}

fn refusal(status: StatusCode, cause: &str) -> Response<ResponseBody> {
    let mut resp = error_response(status, cause);
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without `Host`, and to any
/// request with more than one `Host` line or an invalid one. §3.2.2: the authority of an
/// absolute-form target replaces `Host`, so the node sees the host the client asked for.
fn check_host<B>(req: &mut Request<B>) -> Result<(), String> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next().cloned();
    if hosts.next().is_some() {
        return Err("more than one Host field".into());
    }
    if let Some(host) = &first {
        if !valid_host(host.as_bytes()) {
            return Err(format!(
                "invalid Host `{}`",
                String::from_utf8_lossy(host.as_bytes())
            ));
        }
    }
    let uri = req.uri();
    if let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) {
        if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
            return Err(format!("request target scheme `{scheme}` is not http"));
        }
        if authority.as_str().contains('@') || !valid_host(authority.as_str().as_bytes()) {
            return Err(format!(
                "invalid authority `{authority}` in the request target"
            ));
        }
        let value = HeaderValue::from_str(authority.as_str())
            .map_err(|_| format!("invalid authority `{authority}` in the request target"))?;
        req.headers_mut().insert(header::HOST, value);
        return Ok(());
    }
    if first.is_none() && req.version() == Version::HTTP_11 {
        return Err("HTTP/1.1 request without a Host field".into());
    }
    Ok(())
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2). Empty is valid: RFC 9112
/// §3.2 has clients send an empty `Host` when the target has no authority.
pub(crate) fn valid_host(value: &[u8]) -> bool {
    if value.is_empty() {
        return true;
    }
    let (host_ok, rest) = if value[0] == b'[' {
        let Some(end) = value.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = std::str::from_utf8(&value[1..end]).unwrap_or("");
        (
            literal.parse::<std::net::Ipv6Addr>().is_ok(),
            &value[end + 1..],
        )
    } else {
        let end = value.iter().position(|&b| b == b':').unwrap_or(value.len());
        (valid_reg_name(&value[..end]), &value[end..])
    };
    host_ok
        && match rest {
            [] => true,
            [b':', port @ ..] => valid_port(port),
            _ => false,
        }
}

/// `reg-name = *( unreserved / pct-encoded / sub-delims )` (an IPv4 address is one too),
/// required non-empty here: `Host: :80` names no host.
fn valid_reg_name(name: &[u8]) -> bool {
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => {
                let hex = |at: usize| name.get(at).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) => {}
            _ => return false,
        }
        i += 1;
    }
    !name.is_empty()
}

/// `port = *DIGIT`, and a number a TCP port can be.
fn valid_port(port: &[u8]) -> bool {
    port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(port)
            .ok()
            .filter(|p| !p.is_empty())
            .is_none_or(|p| p.parse::<u16>().is_ok())
}

/// RFC 9112 §6.1: a server that receives a transfer coding it does not understand SHOULD
/// answer 501. The switch decodes `chunked` only; forwarding `gzip, chunked` with the
/// hop-by-hop `Transfer-Encoding` removed would hand the node a body it cannot read.
fn check_transfer_coding(headers: &http::HeaderMap) -> Result<(), String> {
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let text = String::from_utf8_lossy(value.as_bytes());
        for coding in text.split(',').map(str::trim) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return Err(format!(
                    "transfer coding `{coding}` is not supported (only chunked)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_values() {
        for good in [
            "",
            "example.org",
            "example.org:8080",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:443",
            "a-b_c~d.%41",
            "host:",
        ] {
            assert!(valid_host(good.as_bytes()), "{good:?} is valid");
        }
        for bad in [
            "a b",
            "user@host",
            "[::1",
            "[nonsense]",
            "host:99999",
            "host:8o",
            "host:123456",
            ":80",
            "host/path",
            "ho%zzst",
            "[::1]x",
            "h\u{e9}",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad:?} is invalid");
        }
    }

    fn request(version: Version, target: &str, hosts: &[&str]) -> Request<()> {
        let mut builder = Request::get(target).version(version);
        for host in hosts {
            builder = builder.header(header::HOST, *host);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn host_rules() {
        assert!(check_request(&mut request(Version::HTTP_11, "/", &[])).is_some());
        assert!(check_request(&mut request(Version::HTTP_10, "/", &[])).is_none());
        assert!(check_request(&mut request(Version::HTTP_11, "/", &["a", "a"])).is_some());
        let mut absolute = request(Version::HTTP_11, "http://node.example:81/x", &["other"]);
        assert!(check_request(&mut absolute).is_none());
        assert_eq!(absolute.headers()[header::HOST], "node.example:81");
        let mut refused = request(Version::HTTP_11, "/", &[]);
        let resp = check_request(&mut refused).unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
    }

    #[test]
    fn only_chunked_is_forwarded() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("Chunked"),
        );
        assert!(check_transfer_coding(&headers).is_ok());
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        assert!(check_transfer_coding(&headers)
            .unwrap_err()
            .contains("`gzip`"));
    }
}
