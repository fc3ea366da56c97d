//! Clients for the registries a cluster keeps its nodes in, below the switch (which follows
//! them: `[[discovery]]`) and the origin and agent (which register themselves in them).
//!
//! Each module talks to one kind of registry and returns plain data: what the registry says
//! now, or a specific error. What a failure means for a cluster (keep the last good set, hold
//! an empty one) is the switch's decision, not this crate's.
//!
//! Layers: `dns` and `etcd` are independent of each other and use only external crates;
//! `testing` (a real etcd for tests, here so the switch's and the CLI's tests can use it too)
//! uses nothing of this crate.

pub mod dns;
pub mod etcd;
#[doc(hidden)]
pub mod testing;
