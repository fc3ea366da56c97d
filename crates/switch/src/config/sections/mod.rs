//! The configuration's sections that belong to one feature each: their types as written and
//! resolved, and what the parser cannot check about them. The feature modules read their
//! section from here; `config` itself only assembles them.
//!
//! May use: `net`, and `config::cache` (network and size types).

pub(crate) mod access_log;
pub(crate) mod admin_token;
pub(crate) mod admission;
pub(crate) mod discovery;
pub(crate) mod health;
pub(crate) mod http2;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod load;
pub(crate) mod node_tls;
pub(crate) mod outlier;
pub(crate) mod proxy_protocol;
pub(crate) mod redirect;
pub(crate) mod tier;
pub(crate) mod timeouts;
pub(crate) mod upgrade;
pub(crate) mod upstream;
