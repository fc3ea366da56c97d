//! Upstream: talking to the nodes. The connection pool, the switch's own HTTP/1.1 codec, the
//! hyper and HTTP/2 paths, TLS to nodes, the PROXY protocol header sent to them, and the body
//! types that go up to a node and come back.
//!
//! May use: `net`, `config`, `observe`, `state`.

pub mod body;
pub mod h1;
pub mod h2;
pub mod pool;
pub mod proxy_protocol;
pub mod tls;
