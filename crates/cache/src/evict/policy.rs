//! What a policy is: the [`Evictor`] trait every policy implements and the [`ObjectId`] it sees.
//! A leaf: every policy and data structure of `evict` may use it.

/// Identifies one stored object (one variant of one URL) to a policy. Chosen by the store.
pub type ObjectId = u64;

/// A replacement policy. Pure: no clock, no I/O, no locks inside; the store serialises calls.
pub trait Evictor: Send {
    fn name(&self) -> &'static str;
    /// A new object of `size` bytes whose fetch cost is `cost` (≥ 1; the store passes the miss's
    /// latency in microseconds or 1). Returns false when the policy declines to admit it (CLFUS's
    /// admission by value, or size > capacity); the store then does not keep it. Admitting an id
    /// that is already tracked replaces its size (treat as remove + admit).
    fn admit(&mut self, id: ObjectId, size: u64, cost: u64) -> bool;
    /// A hit on a tracked object (unknown ids are ignored).
    fn touch(&mut self, id: ObjectId);
    /// The store dropped the object for its own reasons (purge, expiry, replaced); unknown ids ignored.
    fn remove(&mut self, id: ObjectId);
    /// Chooses the next object to evict, forgets it and returns it; None when nothing is tracked.
    /// The store calls this repeatedly while `bytes()` exceeds its budget.
    fn victim(&mut self) -> Option<ObjectId>;
    /// Objects tracked (admitted and not yet evicted/removed); ghost/history entries not counted.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Sum of sizes of tracked objects.
    fn bytes(&self) -> u64;
}
