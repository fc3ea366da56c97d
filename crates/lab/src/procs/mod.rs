//! Layer 2, the processes the lab starts and talks to: a cluster of `capstan origin` nodes and
//! a `capstan serve` switch, real web servers from Debian (apache2, nginx), the server
//! daemons of the cache and WAN experiments, an etcd for nodes that register themselves, and
//! CPU quotas (cgroups) to start processes under.
//!
//! May use: [`crate::model`].

pub(crate) mod cluster;
pub(crate) mod daemon;
pub(crate) mod etcd;
pub(crate) mod quota;
pub(crate) mod servers;
