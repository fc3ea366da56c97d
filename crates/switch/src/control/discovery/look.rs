//! What a kind's feed tells the common follower: a [`Look`] (the nodes, or why there are none),
//! in full a [`Listing`], and what to do with the entries it dropped ([`Dropped`]). A leaf the
//! kinds and the follower share.

use std::sync::Arc;

use crate::config::NodeConfig;

/// What a source lists now, or why it could not be had.
pub(crate) type Look = Result<Vec<NodeConfig>, String>;

/// What a feed does with the entries its kind dropped from the last list (a DNS record with
/// port 0, an etcd value that is not an address), called when they change: the node
/// followers put them in the source's `/status`, the tier's follower in its own.
pub(crate) type Dropped = Arc<dyn Fn(Vec<String>) + Send + Sync>;

/// What one look at a source found, in full (for `capstan check --resolve`).
#[derive(Debug, Default)]
pub struct Listing {
    /// The nodes it gives.
    pub nodes: Vec<NodeConfig>,
    /// Entries dropped one by one, and why (the rest apply).
    pub dropped: Vec<String>,
    /// Entries not used now but ready to be (DNS SRV records of a higher priority value).
    pub standby: Vec<String>,
}
