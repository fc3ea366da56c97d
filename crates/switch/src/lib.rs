//! The Capstan web switch: a layer-7 front end that classifies every request, dispatches it
//! with a pluggable policy from `capstan-core`, and forwards it over pooled keep-alive
//! connections.
//!
//! The modules form layers that import only downwards:
//! [`net`] → [`config`] → [`observe`] → [`state`] → [`upstream`] → [`pipeline`] →
//! [`frontend`] → [`control`] → [`server`].

pub mod config;
pub mod control;
pub mod frontend;
pub mod net;
pub mod observe;
pub mod pipeline;
pub mod server;
pub mod state;
pub mod upstream;

pub use config::{Config, ConfigError, NodeConfig};
pub use server::{run, start, Running, Switch};
