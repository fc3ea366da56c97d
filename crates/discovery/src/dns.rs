//! DNS SRV and A/AAAA lookups for discovery, on hickory's name-server pool (UDP, TCP when an
//! answer is truncated), asked once per call and cached nowhere: the caller decides when to
//! ask again (the answer's `ttl`).
//!
//! - An SRV name (it starts with `_`: `_http._tcp.web.example`) gives one [`Record`] per SRV
//!   record, its target's addresses taken from the answer's additional section when the server
//!   put them there (CoreDNS, Consul and dnsmasq do), else asked for (A and AAAA).
//! - `host:port` gives one record: the host's A and AAAA addresses with that port. An IP
//!   literal (`10.0.0.5:80`, `[::1]:80`) is answered without asking anyone.
//!
//! Names are taken as absolute: the `search` list of `/etc/resolv.conf` is not applied (only
//! its `nameserver`s are used), so `web:8080` asks for `web.`; write the full name
//! (`web.default.svc.cluster.local:8080`). Nothing is read from `/etc/hosts`.
//!
//! **Bad records are dropped one by one; an answer is refused whole only when trusting it
//! could remove good nodes** (see [`Answer::skipped`] and [`DnsError`]):
//! - dropped, with a line in `skipped`: an SRV record with port 0, with the target `.` (RFC
//!   2782: "decidedly not available"), or whose target does not exist (NXDOMAIN) or has no
//!   A/AAAA record; an address that cannot be a node's (`0.0.0.0`, `::`, multicast,
//!   broadcast); an address and port a record of lower or equal priority gave already.
//! - the whole answer fails: NXDOMAIN or no record for the name itself, SERVFAIL or another
//!   error code, no answer in time (for the name or for any target: a target that merely
//!   failed to answer is not a target that is gone), and an answer whose every record was
//!   dropped ([`DnsError::NoUsableRecord`]) — except when every SRV record has the target
//!   `.`, which is the zone saying "no service": an empty [`Answer`].
//!
//! Layers: `name` and `answer` use only external crates; `client` uses both; `testing` (a
//! dnsmasq harness for tests) uses none of them.

mod answer;
mod client;
mod name;
#[doc(hidden)]
pub mod testing;

pub use answer::{Answer, DnsError, Record};
pub use client::{Options, Resolver};
pub use name::DnsName;
