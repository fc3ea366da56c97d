//! The Capstan web switch: a layer-7 front end that classifies every request, dispatches it
//! with a pluggable policy from `capstan-core`, and forwards it over pooled keep-alive
//! connections.

pub mod access_log;
pub mod admin;
pub mod admin_auth;
pub mod admission;
pub mod body;
pub mod cache_config;
pub mod caching;
pub mod cluster;
pub mod config;
pub mod connection_limits;
pub mod cork;
pub mod forwarding_loop;
pub mod gather;
pub mod h2_nodes;
pub mod health;
pub mod http2;
pub mod io;
pub mod listener;
pub mod membership;
pub mod node_clock;
mod node_h1;
pub mod node_pool;
pub mod node_tls;
pub mod operation_metrics;
pub mod outlier;
pub mod peer;
pub mod proxy;
pub mod proxy_protocol;
pub mod reaper;
pub mod redirect;
pub mod retry;
pub mod send_timeout;
pub mod server;
pub mod socket_calls;
pub mod strict;
pub mod tls;
pub mod tls_metrics;
pub mod upgrade;

pub use config::{Config, ConfigError, NodeConfig};
pub use server::{run, start, Running, Switch};
