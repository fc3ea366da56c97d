//! DNS SRV and A/AAAA lookups for discovery (hickory-resolver).
