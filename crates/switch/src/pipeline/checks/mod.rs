//! The checks a request passes before it is classified: strict HTTP/1.1 parsing, HTTP/2's own
//! rules, and forwarding loops.
//!
//! May use: `net`, `config`, `observe`, `state`, `upstream`, and `pipeline`'s response module.

pub(crate) mod forwarding_loop;
pub(crate) mod http2;
pub(crate) mod limits;
pub(crate) mod strict;
