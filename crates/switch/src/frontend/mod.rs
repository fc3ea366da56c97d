//! The front end: client listeners (plain, TLS, h2c) and the client send timeout.
//!
//! May use: `net`, `config`, `observe`, `state`, `upstream`, `pipeline`.

pub(crate) mod listener;
pub(crate) mod send_timeout;
