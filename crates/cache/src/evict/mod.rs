//! Eviction (replacement) policies behind one trait.
//!
//! CONTRACT (filled in by the eviction work):
//! - `pub type ObjectId = u64;`
//! - `pub trait Evictor: Send` with `name`, `admit(id, size, cost) -> bool`, `touch(id)`,
//!   `remove(id)`, `victim() -> Option<ObjectId>`, `len()`, `bytes()`.
//! - `pub enum EvictionKind { Lru, LfuDa, Gdsf, Clfus, S3Fifo, Sieve }` with `FromStr`,
//!   `name()`, `ALL`, and `pub fn new_evictor(kind, capacity_bytes) -> Box<dyn Evictor>`.
