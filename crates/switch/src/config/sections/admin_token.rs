//! The admin's bearer token (`admin_token`, `admin_token_file`): what a token may be, and the
//! comparison in constant time.

use std::path::Path;

use serde::{Serialize, Serializer};

/// Shortest token accepted: 16 characters of a random base64 string are 96 bits.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// The admin's bearer token. `Debug` never shows it; it serializes as itself so that a
/// configuration written back out still works.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

impl Serialize for AdminToken {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl AdminToken {
    /// A token must be something a client can send: RFC 6750's `b64token`
    /// (`A-Z a-z 0-9 - . _ ~ + /`, then `=` padding), at least `MIN_TOKEN_LEN` long.
    pub fn new(text: &str) -> Result<AdminToken, String> {
        let body = text.trim_end_matches('=');
        if let Some(bad) = body
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "-._~+/".contains(*c)))
        {
            return Err(format!(
                "the token has {bad:?}; use only A-Z a-z 0-9 - . _ ~ + / (and = at the end)"
            ));
        }
        if text.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token is {} characters; use at least {MIN_TOKEN_LEN}",
                text.len()
            ));
        }
        Ok(AdminToken(text.to_string()))
    }

    /// The token in a file: its whole content, without the final line break.
    pub fn from_file(path: &Path) -> Result<AdminToken, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let token = text.strip_suffix('\n').unwrap_or(&text);
        let token = token.strip_suffix('\r').unwrap_or(token);
        if token.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        AdminToken::new(token).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether `presented` is this token, in time that depends on the lengths only.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        let mut differ = expected.len() ^ presented.len();
        for (i, &e) in expected.iter().enumerate() {
            let p = presented.get(i).copied().unwrap_or(!e);
            differ |= usize::from(e ^ p);
        }
        std::hint::black_box(differ) == 0
    }
}
