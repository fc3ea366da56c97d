//! The Capstan web switch: a layer-7 front end that classifies every request, dispatches it
//! with a pluggable policy from `capstan-core`, and forwards it over pooled keep-alive
//! connections.
//!
//! The modules form layers that import only downwards:
//! `net` → `config` → `observe` → `state` → `upstream` → `pipeline` → `frontend` → `control`
//! → `server`; each folder's `mod.rs` says what it may use.

#![warn(missing_docs)]

mod config;
mod control;
mod frontend;
mod net;
mod observe;
mod pipeline;
mod server;
mod state;
mod upstream;

pub use config::cache::ByteSize;
pub use config::sections::admin_token::AdminToken;
pub use config::{
    policy_from_table, resolve_address, Config, ConfigError, DiscoverySource, NodeConfig,
    SourceKind,
};
pub use control::discovery::{resolve_once, Listing};
pub use server::{run, start, Running};
pub use state::switch::Switch;

/// What the switch's own tests and benchmarks reach inside it; not part of its interface.
#[doc(hidden)]
pub mod testing {
    pub use crate::pipeline::checks::forwarding_loop::{capstan_hops, MAX_HOPS};
    pub use crate::state::cluster::Cluster;
    pub use crate::upstream::proxy_protocol::encode_v2;

    /// One refresh of the `file` discovery source called `source`, as its follower makes it:
    /// the file's text parsed (`path` says JSON or TOML), then applied through membership.
    /// Returns the names of the source's nodes after it.
    pub async fn discovery_refresh(
        switch: &crate::Switch,
        source: &str,
        path: &std::path::Path,
        text: &str,
    ) -> Result<Vec<String>, String> {
        let cluster = switch.cluster.load_full();
        let source = (cluster.config.discovery.iter())
            .find(|s| s.name == source)
            .ok_or("no such source")?;
        let nodes = crate::control::discovery::parse_file(source, path, text)?;
        let owned = (switch.discovery.snapshot().into_iter())
            .find(|s| s.name == source.name)
            .map(|s| s.owned)
            .unwrap_or_default();
        let (now, _, _) = (switch.set_discovered(&source.name, &owned, nodes).await)
            .map_err(|e| e.to_string())?;
        switch.discovery.update(source, |s| s.owned = now.clone());
        Ok(now)
    }
}
