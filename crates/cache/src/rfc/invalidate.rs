//! Invalidation after unsafe requests (RFC 9111 §4.4).
//!
//! A successful `POST`, `PUT`, `DELETE`, `PATCH` (or any method not known to be safe) may have
//! changed the resource, so the stored responses for the target URI must go, and those for the
//! `Location` and `Content-Location` it points at may go too, but only on the same host: a
//! response must not be able to evict another site's entries.

use http::header::{CONTENT_LOCATION, LOCATION};
use http::{HeaderMap, Method, StatusCode};

/// The origin-form targets (`/path?query`, the form the store keys on) to invalidate after a
/// response with `status` to a `method` request for `request_target` on `request_host` (the
/// request's `Host`/authority). Empty for safe methods (GET, HEAD, OPTIONS, TRACE) and for
/// error or interim statuses (only 2xx and 3xx count, "non-error"). `request_target` may be
/// origin-form or absolute-form. `Location` and `Content-Location` are resolved against it
/// (RFC 3986 §5.2) and kept only when relative or on the same host (ports and schemes aside,
/// as §4.4 compares "the host part"). No duplicates; the target comes first.
pub fn invalidation_targets(
    method: &Method,
    status: StatusCode,
    request_host: &str,
    request_target: &str,
    resp: &HeaderMap,
) -> Vec<String> {
    if method.is_safe() || !(status.is_success() || status.is_redirection()) {
        return Vec::new();
    }
    let base = match split_absolute(request_target) {
        Some((_, path)) => path,
        None => origin_form(request_target),
    };
    let host = host_part(request_host);
    let mut targets = vec![base.clone()];
    for name in [LOCATION, CONTENT_LOCATION] {
        let resolved = resp
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|reference| resolve(&base, reference.trim(), &host));
        if let Some(target) = resolved {
            if !targets.contains(&target) {
                targets.push(target);
            }
        }
    }
    targets
}

/// Resolves a URI reference against the origin-form `base`, keeping it only when it stays on
/// `host` (lower-cased, without port).
fn resolve(base: &str, reference: &str, host: &str) -> Option<String> {
    let reference = reference.split('#').next().unwrap_or_default();
    if let Some((authority, path)) = split_absolute(reference) {
        return (host_part(authority) == host).then_some(path);
    }
    if has_scheme(reference) {
        return None; // mailto:, urn: … no host of ours
    }
    if reference.is_empty() {
        return Some(base.to_owned());
    }
    let (base_path, _) = base.split_once('?').unwrap_or((base, ""));
    if let Some(query) = reference.strip_prefix('?') {
        return Some(format!("{base_path}?{query}"));
    }
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let merged = if path.starts_with('/') {
        path.to_owned()
    } else {
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        format!("/{}{path}", dir.trim_start_matches('/'))
    };
    let mut out = remove_dot_segments(&merged);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

/// Splits `scheme://authority/path?query` (or `//authority/path`) into the authority and the
/// origin-form rest. `None` when the reference has no authority.
fn split_absolute(reference: &str) -> Option<(&str, String)> {
    let after_scheme = if has_scheme(reference) {
        &reference[reference.find(':')? + 1..]
    } else {
        reference
    };
    let rest = after_scheme.strip_prefix("//")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = if path.starts_with('?') || path.is_empty() {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let (p, q) = path
        .split_once('?')
        .map_or((path.as_str(), None), |(p, q)| (p, Some(q)));
    let mut normal = remove_dot_segments(p);
    if let Some(q) = q {
        normal.push('?');
        normal.push_str(q);
    }
    Some((authority, normal))
}

fn has_scheme(reference: &str) -> bool {
    let Some(colon) = reference.find(':') else {
        return false;
    };
    let scheme = &reference[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn origin_form(target: &str) -> String {
    let target = target.split('#').next().unwrap_or_default();
    if target.starts_with('/') {
        target.to_owned()
    } else {
        format!("/{target}")
    }
}

/// The host of an authority (`user@host:port`, `[v6]:port`), lower-cased.
fn host_part(authority: &str) -> String {
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if hostport.starts_with('[') {
        hostport.find(']').map_or(hostport, |i| &hostport[..=i])
    } else {
        hostport.split(':').next().unwrap_or_default()
    };
    host.to_ascii_lowercase()
}

/// RFC 3986 §5.2.4 on an absolute path: `.` and `..` segments removed, never above the root.
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => {}
            ".." => {
                out.pop();
            }
            s => {
                out.push(s);
                continue;
            }
        }
        if last {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn targets(
        method: Method,
        status: u16,
        target: &str,
        resp: &[(&'static str, &'static str)],
    ) -> Vec<String> {
        let mut h = HeaderMap::new();
        for (n, v) in resp {
            h.append(*n, HeaderValue::from_static(v));
        }
        let status = StatusCode::from_u16(status).unwrap();
        invalidation_targets(&method, status, "Shop.Example:8080", target, &h)
    }

    #[test]
    fn unsafe_method_invalidates_target() {
        // RFC 9111 §4.4
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert_eq!(targets(m, 200, "/cart?id=1", &[]), vec!["/cart?id=1"]);
        }
        let unknown = Method::from_bytes(b"PURGE").unwrap();
        assert_eq!(
            targets(unknown, 204, "/x", &[]),
            vec!["/x"],
            "unknown safety: unsafe"
        );
    }

    #[test]
    fn safe_methods_and_errors_invalidate_nothing() {
        // RFC 9111 §4.4: only non-error responses to unsafe methods.
        assert!(targets(Method::GET, 200, "/a", &[]).is_empty());
        assert!(targets(Method::OPTIONS, 200, "/a", &[]).is_empty());
        assert!(targets(Method::POST, 404, "/a", &[]).is_empty());
        assert!(targets(Method::POST, 500, "/a", &[]).is_empty());
        assert_eq!(targets(Method::POST, 303, "/a", &[]), vec!["/a"]);
    }

    #[test]
    fn location_and_content_location_on_same_host() {
        // RFC 9111 §4.4
        let resp = [
            ("location", "http://shop.example/items/7?v=1#top"),
            ("content-location", "../items/7/summary"),
        ];
        assert_eq!(
            targets(Method::POST, 201, "/items/new", &resp),
            vec!["/items/new", "/items/7?v=1", "/items/7/summary"]
        );
        let rel = [("location", "8"), ("content-location", "/items/new")];
        assert_eq!(
            targets(Method::PUT, 200, "/items/7", &rel),
            vec!["/items/7", "/items/8", "/items/new"]
        );
        let same = [("content-location", "7")];
        assert_eq!(
            targets(Method::PUT, 200, "/items/7", &same),
            vec!["/items/7"],
            "no duplicates"
        );
    }

    #[test]
    fn invalidation_ignores_other_hosts() {
        // RFC 9111 §4.4: MUST NOT invalidate when the host part differs.
        let resp = [
            ("location", "https://evil.example/items/1"),
            ("content-location", "//other.example/x"),
        ];
        assert_eq!(targets(Method::POST, 200, "/a", &resp), vec!["/a"]);
        let scheme_only = [("location", "mailto:ops@shop.example")];
        assert_eq!(targets(Method::POST, 200, "/a", &scheme_only), vec!["/a"]);
    }

    #[test]
    fn absolute_form_target_and_dot_segments() {
        assert_eq!(
            targets(Method::DELETE, 200, "http://shop.example/a/./b/../c", &[]),
            vec!["/a/c"]
        );
        assert_eq!(remove_dot_segments("/a/b/.."), "/a/");
        assert_eq!(remove_dot_segments("/../.."), "/");
        assert_eq!(host_part("u@[::1]:80"), "[::1]");
    }
}
