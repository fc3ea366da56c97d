//! Eviction (replacement) policies behind one trait.
//!
//! PLACEHOLDER until the eviction work merges: the contract with a plain LRU only.

/// Identifies one stored object (one variant of one URL) to a policy.
pub type ObjectId = u64;

/// A replacement policy; the store serialises calls.
pub trait Evictor: Send {
    fn name(&self) -> &'static str;
    fn admit(&mut self, id: ObjectId, size: u64, cost: u64) -> bool;
    fn touch(&mut self, id: ObjectId);
    fn remove(&mut self, id: ObjectId);
    fn victim(&mut self) -> Option<ObjectId>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn bytes(&self) -> u64;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionKind {
    Lru,
}

impl EvictionKind {
    pub const ALL: [EvictionKind; 1] = [EvictionKind::Lru];
    pub fn name(self) -> &'static str {
        "lru"
    }
}

impl std::str::FromStr for EvictionKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lru" => Ok(EvictionKind::Lru),
            _ => Err(format!("unknown eviction policy `{s}` (known: lru)")),
        }
    }
}

struct Lru {
    order: Vec<(ObjectId, u64)>,
    bytes: u64,
    capacity: u64,
}

impl Evictor for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        self.order.push((id, size));
        self.bytes += size;
        true
    }
    fn touch(&mut self, id: ObjectId) {
        if let Some(i) = self.order.iter().position(|e| e.0 == id) {
            let e = self.order.remove(i);
            self.order.push(e);
        }
    }
    fn remove(&mut self, id: ObjectId) {
        if let Some(i) = self.order.iter().position(|e| e.0 == id) {
            self.bytes -= self.order.remove(i).1;
        }
    }
    fn victim(&mut self) -> Option<ObjectId> {
        if self.order.is_empty() {
            return None;
        }
        let (id, size) = self.order.remove(0);
        self.bytes -= size;
        Some(id)
    }
    fn len(&self) -> usize {
        self.order.len()
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

pub fn new_evictor(_kind: EvictionKind, capacity_bytes: u64) -> Box<dyn Evictor> {
    Box::new(Lru {
        order: Vec::new(),
        bytes: 0,
        capacity: capacity_bytes,
    })
}
