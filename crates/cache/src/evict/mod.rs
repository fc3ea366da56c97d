//! Eviction (replacement) policies behind one trait.
//!
//! The store owns the objects; a policy only sees ids, sizes and fetch costs, and answers "which
//! one goes next". Policies are pure: no clock, no I/O, no locks (the store serialises calls), so
//! the simulator replays traces through the same code as the switch.
//!
//! The store's loop: on a miss it calls [`Evictor::admit`] (and keeps the object only if that
//! returns true), then calls [`Evictor::victim`] and drops what it names while
//! [`Evictor::bytes`] exceeds its budget; on a hit it calls [`Evictor::touch`]; when it drops an
//! object for its own reasons (purge, expiry, replacement) it calls [`Evictor::remove`].
//!
//! | kind | from | what it keeps |
//! |---|---|---|
//! | `lru` | — | the most recently used |
//! | `lfu-da` | Arlitt et al.; Squid `heap LFUDA` | the most often used, aged by the last victim's key |
//! | `gdsf` | Cherkasova; Squid `heap GDSF` | high frequency × cost / size, aged likewise |
//! | `clfus` | Traffic Server's RAM cache | high (hits + 1) / (size + 256), admitted by value, with a history of the recently seen |
//! | `s3-fifo` | Yang et al., SOSP'23 | objects reused while in a small probation FIFO, then a 2-bit CLOCK main FIFO |
//! | `sieve` | Zhang et al., NSDI'24 | objects visited since the hand last passed them |
//!
//! Every policy declines an object larger than its `capacity_bytes`; CLFUS may also decline by
//! value. Each policy's file says exactly what it implements and where it departs from its source.
//!
//! Data structures: an id → slot map over a slab of nodes; intrusive doubly linked lists through
//! the slab (LRU, CLFUS, S3-FIFO, SIEVE); a ring of per-key FIFOs (LFU-DA, `bucket_queue`) and a
//! radix heap with a small exact heap in front (GDSF, `radix_queue`), which pop in the same order
//! as the indexed heap they replaced (kept for tests as `heap` and `reference`). Every operation
//! is O(1), amortised for the CLOCK-style sweeps and the radix heap's splits and sweeps, except a
//! pop from GDSF's hot heap (O(log h) over the lowest bucket's entries, at most a few hundred
//! unless many keys are equal) and LFU-DA's ordered map of the keys 16 384 or more above the last
//! victim's (objects hit about that many times).

use std::fmt;
use std::str::FromStr;

mod bucket_queue;
mod clfus;
mod gdsf;
#[cfg(test)]
mod heap;
mod idmap;
mod lfu_da;
mod lru;
mod policy;
mod radix_queue;
#[cfg(test)]
mod reference;
mod s3fifo;
mod sieve;
mod slab;
#[cfg(test)]
mod tests;

pub use policy::{Evictor, ObjectId};

/// The replacement policies, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionKind {
    Lru,
    LfuDa,
    Gdsf,
    Clfus,
    S3Fifo,
    Sieve,
}

impl EvictionKind {
    pub const ALL: [EvictionKind; 6] = [
        EvictionKind::Lru,
        EvictionKind::LfuDa,
        EvictionKind::Gdsf,
        EvictionKind::Clfus,
        EvictionKind::S3Fifo,
        EvictionKind::Sieve,
    ];

    /// The name used in configuration, reports and `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            EvictionKind::Lru => "lru",
            EvictionKind::LfuDa => "lfu-da",
            EvictionKind::Gdsf => "gdsf",
            EvictionKind::Clfus => "clfus",
            EvictionKind::S3Fifo => "s3-fifo",
            EvictionKind::Sieve => "sieve",
        }
    }
}

impl fmt::Display for EvictionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EvictionKind {
    type Err = String;

    /// Accepts the names of [`EvictionKind::name`], in any ASCII case.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        EvictionKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = EvictionKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown eviction policy {s:?}; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// A new, empty policy of `kind`. `capacity_bytes` sizes policies that partition the space
/// (S3-FIFO's small queue, ghost sizes, CLFUS's history) and bounds the largest admissible object.
pub fn new_evictor(kind: EvictionKind, capacity_bytes: u64) -> Box<dyn Evictor> {
    match kind {
        EvictionKind::Lru => Box::new(lru::Lru::new(capacity_bytes)),
        EvictionKind::LfuDa => Box::new(lfu_da::LfuDa::new(capacity_bytes)),
        EvictionKind::Gdsf => Box::new(gdsf::Gdsf::new(capacity_bytes)),
        EvictionKind::Clfus => Box::new(clfus::Clfus::new(capacity_bytes)),
        EvictionKind::S3Fifo => Box::new(s3fifo::S3Fifo::new(capacity_bytes)),
        EvictionKind::Sieve => Box::new(sieve::Sieve::new(capacity_bytes)),
    }
}
