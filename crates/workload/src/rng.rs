//! Seeded random streams.

use rand::SeedableRng;

/// The one generator every Capstan workload stream uses. PCG-XSL-RR 128/64 is specified bit for
/// bit, unlike `StdRng`, whose algorithm may change with any `rand` release.
pub type WorkloadRng = rand_pcg::Pcg64;

/// An independent stream for `(seed, name)`: the name keeps streams for different purposes
/// (tree sizes, request choices, ...) from sharing or shifting each other's draws when one of
/// them changes how many numbers it takes.
pub fn stream(seed: u64, name: &str) -> WorkloadRng {
    WorkloadRng::seed_from_u64(splitmix64(seed ^ fnv1a(name.as_bytes())))
}

/// FNV-1a, 64-bit: a fixed, documented hash (std's `DefaultHasher` is explicitly unstable).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser, to spread nearby seeds (0, 1, 2, ...) across the seed space.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn streams_are_pinned() {
        // A change here means every published seed now gives different workloads: don't.
        let mut r = stream(42, "tree");
        let first = r.next_u64();
        let mut again = stream(42, "tree");
        assert_eq!(first, again.next_u64());
        assert_ne!(first, stream(42, "requests").next_u64());
        assert_ne!(first, stream(43, "tree").next_u64());
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        // Golden value: Pcg64 (rand_pcg 0.3) seeded through seed_from_u64 and our mixing.
        assert_eq!(first, 0x2e38_75f4_4a8a_0d1c);
    }
}
