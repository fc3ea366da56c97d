//! Runtime membership through the admin API, without a reload:
//!
//! - `POST /nodes` adds a node (`name`, `address`, `weight`, as a JSON body or in the query);
//!   it takes requests at once, with slow start when `health.slow_start` is set.
//! - `POST /nodes/NAME/drain`: no new requests; those in flight finish. `/status` shows the
//!   node `draining` with its `active` count. `POST /nodes/NAME/undrain` ends the drain (the
//!   node comes back with slow start).
//! - `DELETE /nodes/NAME` removes the node; requests in flight on it finish there.
//!
//! A change builds a new [`Cluster`] from the current one with the node list changed (nodes
//! that stay keep their runtime; the policy is rebuilt and takes over what the old one learned
//! about them) and swaps it in. A removed node is marked draining before the swap, so not even a
//! request that loaded the old cluster a moment earlier can pick it afterwards. Changes, reloads
//! included, happen one at a time.
//!
//! **Reload**: the configuration file decides membership, as in HAProxy, whose runtime API
//! changes are lost on reload. A node added here that the file does not list leaves (its
//! requests in flight finish); one removed here that the file lists comes back. What belongs to
//! a node that stays (counters, health, a drain) is kept. Write lasting changes to the file.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::Deserialize;

use crate::config::{resolve_address, NodeConfig};
use crate::control::reply::json_with_status;
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::state::switch::Switch;
use capstan_core::text::percent_decode;

/// Largest `POST /nodes` body: one small JSON object.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// Why a membership change was refused; each maps to its HTTP status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MembershipError {
    /// The request itself is wrong (400).
    BadRequest(String),
    /// No node has that name (404).
    UnknownNode(String),
    /// The change conflicts with the cluster as it is (409): a duplicate name, the last node,
    /// a policy that cannot do without the node.
    Conflict(String),
}

impl std::fmt::Display for MembershipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MembershipError::BadRequest(m)
            | MembershipError::UnknownNode(m)
            | MembershipError::Conflict(m) => f.write_str(m),
        }
    }
}

impl MembershipError {
    fn response(&self) -> Response<ResponseBody> {
        let status = match self {
            MembershipError::BadRequest(_) => StatusCode::BAD_REQUEST,
            MembershipError::UnknownNode(_) => StatusCode::NOT_FOUND,
            MembershipError::Conflict(_) => StatusCode::CONFLICT,
        };
        error_response(status, &self.to_string())
    }
}

impl Switch {
    /// Adds a node; it takes requests from the moment this returns.
    pub(crate) async fn add_node(&self, node: NodeConfig) -> Result<Arc<Cluster>, MembershipError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let current = self.cluster.load_full();
        if current.node_named(&node.name).is_some() {
            return Err(MembershipError::Conflict(format!(
                "a node named `{}` exists already",
                node.name
            )));
        }
        let mut nodes = current.config.nodes.clone();
        nodes.push(node.clone());
        let cluster = Arc::new(self.rebuild(&current, nodes)?);
        self.cluster.store(Arc::clone(&cluster));
        tracing::info!(
            node = %node.name,
            address = %node.address,
            "node added through the admin API (generation {})",
            cluster.generation
        );
        Ok(cluster)
    }

    /// Starts or ends a node's drain; returns the node.
    pub(crate) async fn drain_node(
        &self,
        name: &str,
        draining: bool,
    ) -> Result<Arc<NodeRuntime>, MembershipError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let current = self.cluster.load_full();
        let node = Arc::clone(find(&current, name)?);
        node.set_draining(draining, self.epoch.now_nanos());
        tracing::info!(node = %name, "node {}", if draining { "draining" } else { "undrained" });
        Ok(node)
    }

    /// Removes a node; requests in flight on it finish. Returns the removed node.
    pub(crate) async fn remove_node(
        &self,
        name: &str,
    ) -> Result<Arc<NodeRuntime>, MembershipError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let current = self.cluster.load_full();
        let node = Arc::clone(find(&current, name)?);
        if current.nodes.len() == 1 {
            return Err(MembershipError::Conflict(format!(
                "`{name}` is the last node; drain it instead, or add another first"
            )));
        }
        let nodes = current
            .config
            .nodes
            .iter()
            .filter(|n| n.name != name)
            .cloned()
            .collect();
        let cluster = self.rebuild(&current, nodes)?;
        // Before the swap: a request holding the old cluster must not pick the node either.
        node.set_draining(true, self.epoch.now_nanos());
        self.cluster.store(Arc::new(cluster));
        tracing::info!(node = %name, "node removed through the admin API");
        Ok(node)
    }

    /// Makes the nodes a discovery source owns exactly `wanted` (see
    /// `crate::control::discovery`): `owned` names the nodes it added before; every other node
    /// stays. A wanted node whose name or address another node has is skipped.
    /// Returns the names the source owns now, whether the cluster changed, and the skipped
    /// nodes with why (the caller logs them once, not at every look).
    pub(crate) async fn set_discovered(
        &self,
        source: &str,
        owned: &[String],
        wanted: Vec<NodeConfig>,
    ) -> Result<(Vec<String>, bool, Vec<String>), MembershipError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let current = self.cluster.load_full();
        let mut nodes: Vec<NodeConfig> = current
            .config
            .nodes
            .iter()
            .filter(|n| !owned.contains(&n.name))
            .cloned()
            .collect();
        let others = nodes.len();
        let mut clashes = Vec::new();
        for node in wanted {
            if let Some(other) = nodes[..others]
                .iter()
                .find(|n| n.address == node.address || n.name == node.name)
            {
                clashes.push(format!(
                    "{} ({}): node `{}` ({}) is in the cluster already",
                    node.name, node.address, other.name, other.address
                ));
                continue;
            }
            nodes.push(node);
        }
        let now_owned: Vec<String> = nodes[others..].iter().map(|n| n.name.clone()).collect();
        let unchanged = nodes.len() == current.config.nodes.len()
            && nodes
                .iter()
                .all(|n| current.config.nodes.iter().any(|c| c == n));
        if unchanged {
            return Ok((now_owned, false, clashes));
        }
        if nodes.is_empty() {
            return Err(MembershipError::Conflict(
                "the discovered list would leave no node; the current ones stay".into(),
            ));
        }
        let removed: Vec<Arc<NodeRuntime>> = current
            .nodes
            .iter()
            .filter(|n| !nodes.iter().any(|k| k.name == n.config.name))
            .cloned()
            .collect();
        let cluster = self.rebuild(&current, nodes)?;
        // Before the swap, as in `remove_node`.
        for node in &removed {
            node.set_draining(true, self.epoch.now_nanos());
        }
        let generation = cluster.generation;
        let summary = difference(&current, &cluster);
        self.cluster.store(Arc::new(cluster));
        tracing::info!(
            source,
            "discovered nodes applied (generation {generation}){summary}"
        );
        Ok((now_owned, true, clashes))
    }

    /// The current cluster with another node list, as the next generation.
    fn rebuild(
        &self,
        current: &Cluster,
        nodes: Vec<NodeConfig>,
    ) -> Result<Cluster, MembershipError> {
        let mut config = (*current.config).clone();
        config.nodes = nodes;
        Cluster::build(
            config,
            current.generation + 1,
            Some(current),
            self.epoch.now_nanos(),
        )
        .map_err(|e| {
            MembershipError::Conflict(format!(
                "not possible with the current policy: {}",
                e.message
            ))
        })
    }
}

fn find<'a>(cluster: &'a Cluster, name: &str) -> Result<&'a Arc<NodeRuntime>, MembershipError> {
    cluster.node_named(name).map(|(_, n)| n).ok_or_else(|| {
        let names: Vec<&str> = cluster
            .nodes
            .iter()
            .map(|n| n.config.name.as_str())
            .collect();
        MembershipError::UnknownNode(format!("no node `{name}` (nodes: {})", names.join(", ")))
    })
}

/// How the node list changed from `old` to `new`, for a reload's summary ("" when it did not).
pub(crate) fn difference(old: &Cluster, new: &Cluster) -> String {
    let missing_from = |a: &Cluster, b: &Cluster| -> Vec<String> {
        a.nodes
            .iter()
            .filter(|n| b.node_named(&n.config.name).is_none())
            .map(|n| n.config.name.clone())
            .collect()
    };
    let (joined, left) = (missing_from(new, old), missing_from(old, new));
    let mut parts = Vec::new();
    if !joined.is_empty() {
        parts.push(format!("joined: {}", joined.join(", ")));
    }
    if !left.is_empty() {
        parts.push(format!("left: {}", left.join(", ")));
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(" ({})", parts.join("; ")),
    }
}

/// `/nodes` and `/nodes/NAME[/drain|/undrain]` on the admin listener (already authorised).
pub(crate) async fn route(switch: &Arc<Switch>, req: Request<Incoming>) -> Response<ResponseBody> {
    let path = req.uri().path().to_string();
    let rest = path.strip_prefix("/nodes").unwrap_or_default();
    let segments: Vec<String> = rest
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let method = req.method().clone();
    let names: Vec<&str> = segments.iter().map(String::as_str).collect();
    let result = match (&method, names.as_slice()) {
        (&Method::POST, []) => add(switch, req).await,
        (&Method::DELETE, [name]) => switch.remove_node(name).await.map(|node| {
            json_with_status(
                StatusCode::OK,
                &serde_json::json!({
                    "removed": node.config.name,
                    "active": node.active.load(std::sync::atomic::Ordering::Relaxed),
                    "generation": switch.cluster.load().generation,
                }),
            )
        }),
        (&Method::POST, [name, action @ ("drain" | "undrain")]) => switch
            .drain_node(name, *action == "drain")
            .await
            .map(|node| drain_answer(&node)),
        (_, [] | [_] | [_, "drain" | "undrain"]) => {
            return error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "use POST /nodes to add a node, DELETE /nodes/NAME to remove one, \
                 POST /nodes/NAME/drain or /undrain (GET /status lists them)",
            )
        }
        _ => {
            return error_response(
                StatusCode::NOT_FOUND,
                "no such admin page (POST /nodes, DELETE /nodes/NAME, POST /nodes/NAME/drain, \
                 POST /nodes/NAME/undrain)",
            )
        }
    };
    result.unwrap_or_else(|e| e.response())
}

fn drain_answer(node: &NodeRuntime) -> Response<ResponseBody> {
    json_with_status(
        StatusCode::OK,
        &serde_json::json!({
            "node": node.config.name,
            "draining": node.is_draining(),
            "active": node.active.load(std::sync::atomic::Ordering::Relaxed),
        }),
    )
}

/// What `POST /nodes` may say, as JSON or as query parameters.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewNode {
    name: Option<String>,
    address: Option<String>,
    weight: Option<u32>,
    /// Where `[redirect]` sends clients for this node.
    public_url: Option<String>,
}

async fn add(
    switch: &Arc<Switch>,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, MembershipError> {
    let query = req.uri().query().map(str::to_string);
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| MembershipError::BadRequest(format!("cannot read the body: {e}")))?
        .to_bytes();
    let asked = match body.iter().all(u8::is_ascii_whitespace) {
        true => from_query(query.as_deref())?,
        false => serde_json::from_slice(&body)
            .map_err(|e| MembershipError::BadRequest(format!("bad JSON body: {e}")))?,
    };
    let node = resolve(asked).await?;
    let cluster = switch.add_node(node.clone()).await?;
    Ok(json_with_status(
        StatusCode::CREATED,
        &serde_json::json!({
            "added": node,
            "generation": cluster.generation,
            "nodes": cluster.nodes.len(),
        }),
    ))
}

fn from_query(query: Option<&str>) -> Result<NewNode, MembershipError> {
    let mut asked = NewNode::default();
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        match key {
            "name" => asked.name = Some(value),
            "address" => asked.address = Some(value),
            "public_url" => asked.public_url = Some(value),
            "weight" => {
                asked.weight = Some(value.parse().map_err(|_| {
                    MembershipError::BadRequest(format!("weight `{value}` is not a whole number"))
                })?)
            }
            other => {
                return Err(MembershipError::BadRequest(format!(
                    "unknown parameter `{other}` (give name, address, weight, public_url)"
                )))
            }
        }
    }
    Ok(asked)
}

/// Checks a new node and resolves its address (off the event loop: a name may need DNS).
async fn resolve(asked: NewNode) -> Result<NodeConfig, MembershipError> {
    let bad = MembershipError::BadRequest;
    let Some(address_text) = asked.address.filter(|a| !a.is_empty()) else {
        return Err(bad(
            "give the node's address: {\"name\": \"n5\", \"address\": \"host:port\", \"weight\": 1} \
             or ?name=n5&address=host:port"
                .into(),
        ));
    };
    let name = asked.name.unwrap_or_else(|| address_text.clone());
    check_name(&name).map_err(bad)?;
    let weight = asked.weight.unwrap_or(1);
    if weight == 0 {
        return Err(bad(format!("node `{name}`: weight must be at least 1")));
    }
    let text = address_text.clone();
    let address = tokio::task::spawn_blocking(move || resolve_address(&text))
        .await
        .map_err(|e| bad(format!("resolving `{address_text}` failed: {e}")))?
        .map_err(bad)?;
    let public_url = match asked.public_url {
        Some(url) => Some(crate::config::check_public_url(&url).map_err(bad)?),
        None => None,
    };
    Ok(NodeConfig {
        name,
        address,
        weight,
        public_url,
        report_address: None,
        tls: None,
        protocol: Default::default(),
    })
}

/// A node name must be usable in `/nodes/NAME` and in the `X-Capstan-Node` header.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("node name must not be empty".into());
    }
    if name.len() > 128 {
        return Err("node name must be at most 128 bytes".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "/?#%".contains(*c))
    {
        return Err(format!(
            "node name `{name}` has {c:?}; use letters, digits, - . _ : etc."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_read_and_checked() {
        let asked = from_query(Some("name=n5&address=127.0.0.1%3A9005&weight=3")).unwrap();
        assert_eq!(asked.name.as_deref(), Some("n5"));
        assert_eq!(asked.address.as_deref(), Some("127.0.0.1:9005"));
        assert_eq!(asked.weight, Some(3));
        let e = from_query(Some("address=x:1&weight=-1")).unwrap_err();
        assert!(e.to_string().contains("weight `-1`"), "{e}");
        let e = from_query(Some("adress=x:1")).unwrap_err();
        assert!(e.to_string().contains("unknown parameter `adress`"), "{e}");
    }

    #[test]
    fn names_must_fit_in_a_path_and_a_header() {
        assert!(check_name("node-5.rack_2:a").is_ok());
        for bad in ["", "a/b", "a b", "a\u{7}", "a?", "a%2F"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
