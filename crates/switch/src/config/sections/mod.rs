//! The configuration's sections that belong to one feature each: their types as written and
//! resolved, and what the parser cannot check about them. The feature modules read their
//! section from here; `config` itself only assembles them.
//!
//! May use: `net`, and `config::cache` (network and size types).

pub mod access_log;
pub mod admin_token;
pub mod http2;
pub mod listener;
pub mod node_tls;
pub mod proxy_protocol;
pub mod upgrade;
