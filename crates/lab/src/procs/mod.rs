//! Layer 2, the processes the lab starts and talks to: a cluster of `capstan origin` nodes and
//! a `capstan serve` switch, real web servers from Debian (apache2, nginx), and the server
//! daemons of the cache and WAN experiments.
//!
//! May use: [`crate::model`].

pub(crate) mod cluster;
pub(crate) mod daemon;
pub(crate) mod servers;
