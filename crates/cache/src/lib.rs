//! Capstan's HTTP cache (RFC 9111), the layer that lets the switch answer cachable requests
//! itself, as Varnish, Traffic Server, nginx `proxy_cache` and Squid do in front of a cluster.
//!
//! - [`rfc`]: what HTTP says — storability, freshness, age, validation, `Vary`, ranges,
//!   invalidation. Pure functions: every clock reading is an argument.
//! - [`evict`]: replacement policies behind one trait (LRU, LFU-DA, GDSF, CLFUS, S3-FIFO,
//!   SIEVE). Pure and size-aware; the simulator replays traces through the same code.
//! - [`key`]: the primary key (scheme, host, path, query) and its per-class rules.
//! - [`store`]: the memory tier with a byte budget, keyed by URL, key extra and `Vary` variant;
//!   [`packed`] keeps each entry's header fields in one allocation.
//! - [`disk`]: the optional disk tier, a directory with a byte budget that survives a restart.
//!
//! The async glue (request coalescing, streaming fills, background revalidation) lives in the
//! switch, which owns the runtime.

pub mod disk;
pub mod evict;
pub mod key;
pub mod packed;
pub mod rfc;
pub mod store;
