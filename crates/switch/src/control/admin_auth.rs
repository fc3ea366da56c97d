//! Who may change the switch through its admin listener: an optional bearer token (RFC 6750)
//! for every endpoint but `GET`/`HEAD`, compared in constant time, and the warning for an
//! admin listener reachable from other hosts without one.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use crate::config::sections::admin_token::AdminToken;
use crate::config::Config;
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;

const REALM: &str = "Bearer realm=\"capstan-admin\"";

/// `None` when the request carries the token; else the `401` to send.
pub(crate) fn refusal(token: &AdminToken, headers: &HeaderMap) -> Option<Response<ResponseBody>> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .and_then(|v| {
            let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
            scheme
                .eq_ignore_ascii_case(b"bearer")
                .then(|| rest.trim_ascii())
        });
    let (challenge, cause) = match presented {
        Some(p) if token.matches(p) => return None,
        Some(_) => (
            format!("{REALM}, error=\"invalid_token\""),
            "the bearer token is wrong",
        ),
        None => (
            REALM.to_string(),
            "this endpoint changes the switch; send Authorization: Bearer <admin token>",
        ),
    };
    let mut resp = error_response(StatusCode::UNAUTHORIZED, cause);
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_str(&challenge).expect("an ASCII challenge"),
    );
    Some(resp)
}

impl Config {
    /// Why the admin listener is exposed, when it listens beyond loopback without a token.
    pub(crate) fn admin_exposure_warning(&self) -> Option<String> {
        let admin = self.admin?;
        let loopback = match admin.ip() {
            std::net::IpAddr::V4(ip) => ip.is_loopback(),
            std::net::IpAddr::V6(ip) => ip.to_canonical().is_loopback(),
        };
        (!loopback && self.admin_token.is_none()).then(|| {
            format!(
                "the admin listener {admin} is not on loopback and no admin token is set: \
                 anyone who can reach it can reload the configuration and purge the cache \
                 (set admin_token_file, or listen on 127.0.0.1)"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> AdminToken {
        AdminToken::new("s3cret-token-0123456789").unwrap()
    }

    #[test]
    fn token_syntax_and_length() {
        assert!(AdminToken::new("abcdefghijklmnop").is_ok());
        assert!(AdminToken::new("abcdefghijklmno+/==").is_ok());
        assert!(AdminToken::new("short")
            .unwrap_err()
            .contains("at least 16"));
        assert!(AdminToken::new("has a space in it ok")
            .unwrap_err()
            .contains("' '"));
        assert!(
            AdminToken::new("a=b-cdefghijklmnopq").is_err(),
            "= only at the end"
        );
        assert_eq!(format!("{:?}", token()), "AdminToken(…)");
    }

    #[test]
    fn matches_only_the_same_bytes() {
        let t = token();
        assert!(t.matches(b"s3cret-token-0123456789"));
        assert!(!t.matches(b"s3cret-token-0123456788"));
        assert!(!t.matches(b"s3cret-token-012345678"));
        assert!(!t.matches(b"s3cret-token-01234567890"));
        assert!(!t.matches(b""));
    }

    #[test]
    fn authorization_header() {
        let t = token();
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            h
        };
        assert!(refusal(&t, &with("Bearer s3cret-token-0123456789")).is_none());
        assert!(refusal(&t, &with("bearer  s3cret-token-0123456789")).is_none());
        let wrong = refusal(&t, &with("Bearer nope")).unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        assert!(wrong.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("invalid_token"));
        let basic = refusal(&t, &with("Basic czNjcmV0")).unwrap();
        assert_eq!(basic.headers()[header::WWW_AUTHENTICATE], REALM);
        assert!(refusal(&t, &HeaderMap::new()).is_some());
    }

    #[test]
    fn exposure_warning_only_beyond_loopback_without_token() {
        let mut c = Config::from_parts(Vec::new(), Vec::new());
        assert_eq!(c.admin_exposure_warning(), None, "no admin listener");
        c.admin = Some("127.0.0.1:9900".parse().unwrap());
        assert_eq!(c.admin_exposure_warning(), None);
        c.admin = Some("[::1]:9900".parse().unwrap());
        assert_eq!(c.admin_exposure_warning(), None);
        c.admin = Some("0.0.0.0:9900".parse().unwrap());
        let warning = c.admin_exposure_warning().unwrap();
        assert!(warning.contains("0.0.0.0:9900"), "{warning}");
        c.admin_token = Some(token());
        assert_eq!(c.admin_exposure_warning(), None);
    }
}
