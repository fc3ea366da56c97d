//! Capstan's HTTP cache (RFC 9111), the layer that lets the switch answer cachable requests
//! itself, as Varnish, Traffic Server, nginx `proxy_cache` and Squid do in front of a cluster.
//!
//! - [`rfc`]: what HTTP says — storability, freshness, age, validation, `Vary`, ranges,
//!   invalidation. Pure functions: every clock reading is an argument.
//! - [`evict`]: replacement policies behind one trait (LRU, LFU-DA, GDSF, CLFUS, S3-FIFO,
//!   SIEVE). Pure and size-aware; the simulator replays traces through the same code.
//! - [`store`]: the storage tiers (memory with a byte budget; an optional disk directory that
//!   survives a restart) keyed by primary key and `Vary` variant.
//!
//! The async glue (request coalescing, streaming fills, background revalidation) lives in the
//! switch, which owns the runtime.

pub mod disk;
pub mod evict;
pub mod key;
pub mod packed;
pub mod rfc;
pub mod store;
