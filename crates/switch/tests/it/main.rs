//! capstan-switch's integration tests, one binary: each module was once a test file of
//! its own; in one binary they link once and share the test threads.

mod cache_common;
mod common;

mod access_log;
mod admin;
mod cache;
mod cache_conformance;
mod connection_limits;
mod discovery;
mod discovery_dns;
mod discovery_etcd;
mod feedback;
mod h2_nodes;
mod health;
mod idle;
mod interim;
mod lifecycle;
mod limits;
mod membership;
mod node_h1;
mod node_pool;
mod node_tls;
mod one_road;
mod outlier;
mod overload;
mod policies;
mod proxy;
mod proxy_protocol;
mod redirect;
mod retry;
mod strict;
mod tls;
mod upgrade;
