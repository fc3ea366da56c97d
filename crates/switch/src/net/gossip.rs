//! The tier's gossip datagrams: what each switch tells its peers about every node (its own
//! active requests on it, requests finished, a recent latency, whether it has the node out),
//! encoded and decoded. What a switch keeps of its peers' reports and sums is
//! `crate::state::gossip`'s; the socket and the timer are `crate::control::gossip`'s.
//!
//! Each switch pushes its **own** counts to every other peer once per `tier.gossip_period` (full
//! mesh, no relaying: a report is one hop old at most, and a datagram holds only the sender's
//! own nodes, so its size does not grow with the tier).
//!
//! **Numbered, not named.** A switch of a tier of 16 with 1,000 nodes takes 15,000 reports per
//! period; named entries (a string decoded, hashed and looked up each) cost it a quarter of a
//! core at 100 ms. So a round's counts carry no names: an entry is a node's position in the
//! sender's [`Table`] (its nodes sorted by name), and the datagram names the table by a hash of
//! its names. Peers with the same node list have the same table, and a receiver whose own table
//! has that hash takes the positions as its own — the common case, with no string touched. For
//! the other case (lists that differ: a reload or a discovery change not yet seen everywhere),
//! every [`NAMES_EVERY`]th round (and the first ones of a run) the sender also sends its table's
//! names, and a receiver with another table maps the sender's positions to its own by name once,
//! then uses the map until either table changes. Counts of a table the receiver cannot map yet
//! are dropped and counted (`Taken::Unmapped` in `crate::state::gossip`), not guessed.
//!
//! **Changes, not every count.** Like HAProxy's peers protocol, which pushes only the stick-table
//! entries that changed, a round sends every node's counts only every [`NAMES_EVERY`]th time
//! (and in a run's first rounds); in between it sends the nodes whose counts changed since the
//! previous round, each with its position — at least one datagram, so an idle round still says
//! "alive". A lost datagram leaves the counts it carried stale until the next full round, at
//! most [`NAMES_EVERY`] periods later.
//!
//! The datagram (integers big-endian; `varint` is LEB128), at most [`MAX_DATAGRAM`] bytes:
//!
//! ```text
//! "CPGS" version:u8 boot:u64 seq:u64 table:u64 total:u32 kind:u8 first:u32 count:u16
//! kind 0, counts: count × ( varint(active × 2 + ejected) varint(finished) varint(latency_us) )
//! kind 1, names:  count × ( name_len:u8 name:[u8; name_len] )
//! kind 2, changes: count × ( varint(gap) counts ), a position being the previous one + 1 + gap
//!                  (the first: `first` + gap)
//! ```
//!
//! `boot` tells one run of a switch from the next (a restarted peer starts its `seq` again);
//! `seq` numbers the sender's rounds, and a report of an older round of the same run than one
//! already taken is dropped. `total` is the table's length and `first..first + count` the
//! positions the datagram holds, so each datagram is read alone.
//!
//! Everything here is pure (no sockets, no clock), so it is tested directly.

use std::hash::Hasher;

use rustc_hash::FxHasher;

/// What a datagram starts with.
pub(crate) const MAGIC: [u8; 4] = *b"CPGS";

/// The encoding's version; a datagram of another version is malformed to this switch.
pub(crate) const VERSION: u8 = 2;

/// The largest datagram sent or taken: fits one packet on any IPv4 or IPv6 path (IPv6's
/// minimum MTU is 1,280 bytes, less its 48 bytes of IP and UDP headers), so a report is never
/// fragmented on a real network.
pub(crate) const MAX_DATAGRAM: usize = 1200;

/// Bytes of the header before the entries.
const HEADER: usize = 4 + 1 + 8 + 8 + 8 + 4 + 1 + 4 + 2;

/// The most bytes a counts entry takes (three varints: 33 + 64 + 32 bits), and a change entry
/// (its gap first).
const MAX_COUNTS_ENTRY: usize = 5 + 10 + 5;
const MAX_CHANGE_ENTRY: usize = 5 + MAX_COUNTS_ENTRY;

/// A round whose `seq` is a multiple of this carries the table's names and every node's counts
/// (as do a run's first [`NAMES_FIRST`] rounds), so a peer with another node list can map
/// positions, and a peer that lost a datagram has every count again, within this many periods.
pub(crate) const NAMES_EVERY: u64 = 10;

/// A run's first rounds all carry names: a peer that starts with another list learns it at once.
pub(crate) const NAMES_FIRST: u64 = 3;

/// One switch's counts for one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeReport {
    /// Requests the sender has on the node (in flight and waiting in its admission queue).
    pub active: u32,
    /// Responses the sender has received from the node since it started.
    pub finished: u64,
    /// The sender's recent latency of the node's requests, microseconds (0: none yet).
    pub latency_us: u32,
    /// The sender has the node out (outlier ejection, passive back-off, failed checks).
    pub ejected: bool,
}

/// A switch's nodes in gossip order (sorted by name), with the hash that names the order.
/// Nodes whose name is longer than 255 bytes are left out (no peer could learn of them).
#[derive(Clone, Debug)]
pub(crate) struct Table {
    pub id: u64,
    /// Names in table order.
    pub names: Vec<String>,
    /// For each table position, the index of the node in the list the table was made from.
    pub order: Vec<usize>,
    /// Nodes left out (name over 255 bytes).
    pub unnamed: usize,
}

impl Table {
    /// The table of `names` (a cluster's nodes, in the cluster's order).
    pub(crate) fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Table {
        let mut named: Vec<(&str, usize)> = Vec::new();
        let mut unnamed = 0;
        for (index, name) in names.into_iter().enumerate() {
            match name.len() <= usize::from(u8::MAX) {
                true => named.push((name, index)),
                false => unnamed += 1,
            }
        }
        named.sort_unstable();
        let mut hash = FxHasher::default();
        for (name, _) in &named {
            hash.write_usize(name.len());
            hash.write(name.as_bytes());
        }
        Table {
            id: hash.finish(),
            names: named.iter().map(|(n, _)| n.to_string()).collect(),
            order: named.iter().map(|(_, i)| *i).collect(),
            unnamed,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// Which round of which run of its sender a datagram belongs to, and which table it speaks of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub boot: u64,
    pub seq: u64,
    pub table: u64,
    pub total: u32,
    pub first: u32,
}

/// What a datagram holds after its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entries {
    Counts(Vec<NodeReport>),
    Names(Vec<String>),
    /// Counts of some positions: (position, counts).
    Changes(Vec<(u32, NodeReport)>),
}

/// Whether round `seq` sends the names and every count.
pub(crate) fn is_full_round(seq: u64) -> bool {
    seq <= NAMES_FIRST || seq.is_multiple_of(NAMES_EVERY)
}

/// Encodes one round: `reports` in `table` order; `previous`, what the previous round sent
/// (`None`: nothing yet, or another table). A full round ([`is_full_round`], or without
/// `previous`) is the names and every count; another one the counts that changed since
/// `previous`, at least one datagram.
pub(crate) fn encode(
    boot: u64,
    seq: u64,
    table: &Table,
    reports: &[NodeReport],
    previous: Option<&[NodeReport]>,
) -> Vec<Vec<u8>> {
    let mut datagrams = Vec::new();
    let previous = previous.filter(|p| p.len() == reports.len());
    let Some(previous) = previous.filter(|_| !is_full_round(seq)) else {
        encode_entries(boot, seq, table, 1, &mut datagrams, |d, p| {
            let name = table.names[p].as_bytes();
            if d.len() + 1 + name.len() > MAX_DATAGRAM {
                return false;
            }
            d.push(name.len() as u8);
            d.extend_from_slice(name);
            true
        });
        encode_entries(boot, seq, table, 0, &mut datagrams, |d, p| {
            if d.len() + MAX_COUNTS_ENTRY > MAX_DATAGRAM {
                return false;
            }
            put_counts(d, &reports[p]);
            true
        });
        return datagrams;
    };
    let changed: Vec<usize> = (0..reports.len())
        .filter(|&p| reports[p] != previous[p])
        .collect();
    encode_changes(boot, seq, table, reports, &changed, &mut datagrams);
    datagrams
}

/// Whether a datagram [`encode`] made is one of the table's names: a peer that already speaks
/// of the same table needs none (see [`SharedView::has_our_table`]).
pub(crate) fn is_names(datagram: &[u8]) -> bool {
    datagram.get(HEADER - 7) == Some(&1)
}

/// Appends datagrams of the `changed` positions' counts (one, empty, when none changed).
fn encode_changes(
    boot: u64,
    seq: u64,
    table: &Table,
    reports: &[NodeReport],
    changed: &[usize],
    datagrams: &mut Vec<Vec<u8>>,
) {
    let mut rest = changed;
    loop {
        let first = rest.first().copied().unwrap_or(0);
        let mut d = header(boot, seq, table, 2, first);
        let (mut count, mut previous) = (0u16, None);
        while let Some(&p) = rest.first() {
            if d.len() + MAX_CHANGE_ENTRY > MAX_DATAGRAM || count == u16::MAX {
                break;
            }
            let gap = match previous {
                None => p - first,
                Some(q) => p - q - 1,
            };
            put_varint(&mut d, gap as u64);
            put_counts(&mut d, &reports[p]);
            (count, previous, rest) = (count + 1, Some(p), &rest[1..]);
        }
        d[HEADER - 2..HEADER].copy_from_slice(&count.to_be_bytes());
        datagrams.push(d);
        if rest.is_empty() {
            return;
        }
    }
}

fn put_counts(d: &mut Vec<u8>, r: &NodeReport) {
    put_varint(d, u64::from(r.active) << 1 | u64::from(r.ejected));
    put_varint(d, r.finished);
    put_varint(d, u64::from(r.latency_us));
}

/// A datagram's header with a count of 0, to be set when its entries are in.
fn header(boot: u64, seq: u64, table: &Table, kind: u8, first: usize) -> Vec<u8> {
    let mut d = Vec::with_capacity(MAX_DATAGRAM);
    d.extend_from_slice(&MAGIC);
    d.push(VERSION);
    d.extend_from_slice(&boot.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&table.id.to_be_bytes());
    d.extend_from_slice(&(table.len() as u32).to_be_bytes());
    d.push(kind);
    d.extend_from_slice(&(first as u32).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d
}

/// Appends datagrams of `kind` for every position of `table`; `put` writes one entry into a
/// datagram, or says it does not fit.
fn encode_entries(
    boot: u64,
    seq: u64,
    table: &Table,
    kind: u8,
    datagrams: &mut Vec<Vec<u8>>,
    mut put: impl FnMut(&mut Vec<u8>, usize) -> bool,
) {
    let total = table.len();
    let mut first = 0;
    while first < total {
        let mut d = header(boot, seq, table, kind, first);
        let mut count = 0u16;
        while first + usize::from(count) < total
            && count < u16::MAX
            && put(&mut d, first + usize::from(count))
        {
            count += 1;
        }
        d[HEADER - 2..HEADER].copy_from_slice(&count.to_be_bytes());
        datagrams.push(d);
        first += usize::from(count.max(1));
    }
}

fn put_varint(d: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        d.push(v as u8 | 0x80);
        v >>= 7;
    }
    d.push(v as u8);
}

/// Reads big-endian integers and varints off a datagram; every read says what was missing.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("cut short in {what}"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }
    fn varint(&mut self, bits: u32, what: &str) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.array::<1>(what)?[0];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return match bits == 64 || v >> bits == 0 {
                    true => Ok(v),
                    false => Err(format!("{what} over {bits} bits")),
                };
            }
        }
        Err(format!("{what}: a varint longer than 64 bits"))
    }
}

/// Decodes one datagram; the error says what is wrong with it.
pub(crate) fn decode(datagram: &[u8]) -> Result<(Header, Entries), String> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(format!(
            "{} bytes, more than {MAX_DATAGRAM}",
            datagram.len()
        ));
    }
    let mut r = Reader(datagram);
    if r.take(4, "the magic")? != MAGIC {
        return Err("not a Capstan gossip datagram".into());
    }
    let version = r.array::<1>("the version")?[0];
    if version != VERSION {
        return Err(format!("version {version}, this switch reads {VERSION}"));
    }
    let boot = u64::from_be_bytes(r.array("the boot id")?);
    let seq = u64::from_be_bytes(r.array("the sequence number")?);
    let table = u64::from_be_bytes(r.array("the table")?);
    let total = u32::from_be_bytes(r.array("the table's length")?);
    let kind = r.array::<1>("the kind")?[0];
    let first = u32::from_be_bytes(r.array("the first position")?);
    let count = u16::from_be_bytes(r.array("the count")?);
    if kind != 2 && u64::from(first) + u64::from(count) > u64::from(total) {
        return Err(format!(
            "positions {first}..{} past the table's {total}",
            u64::from(first) + u64::from(count)
        ));
    }
    let header = Header {
        boot,
        seq,
        table,
        total,
        first,
    };
    let entries = match kind {
        0 => Entries::Counts(decode_counts(&mut r, count)?),
        1 => Entries::Names(decode_names(&mut r, count)?),
        2 => Entries::Changes(decode_changes(&mut r, count, first, total)?),
        k => return Err(format!("unknown kind {k}")),
    };
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the last entry", r.0.len()));
    }
    Ok((header, entries))
}

fn decode_counts(r: &mut Reader, count: u16) -> Result<Vec<NodeReport>, String> {
    let mut reports = Vec::with_capacity(usize::from(count).min(MAX_DATAGRAM / 3));
    for _ in 0..count {
        reports.push(read_counts(r)?);
    }
    Ok(reports)
}

fn read_counts(r: &mut Reader) -> Result<NodeReport, String> {
    let active = r.varint(33, "an active count")?;
    Ok(NodeReport {
        active: (active >> 1) as u32,
        ejected: active & 1 == 1,
        finished: r.varint(64, "a finished count")?,
        latency_us: r.varint(32, "a latency")? as u32,
    })
}

fn decode_changes(
    r: &mut Reader,
    count: u16,
    first: u32,
    total: u32,
) -> Result<Vec<(u32, NodeReport)>, String> {
    let mut changes = Vec::with_capacity(usize::from(count).min(MAX_DATAGRAM / 4));
    let mut next = u64::from(first);
    for _ in 0..count {
        let position = next + r.varint(32, "a position's gap")?;
        if position >= u64::from(total) {
            return Err(format!("position {position} past the table's {total}"));
        }
        changes.push((position as u32, read_counts(r)?));
        next = position + 1;
    }
    Ok(changes)
}

fn decode_names(r: &mut Reader, count: u16) -> Result<Vec<String>, String> {
    let mut names = Vec::with_capacity(usize::from(count).min(MAX_DATAGRAM / 2));
    for _ in 0..count {
        let len = r.array::<1>("a name's length")?[0];
        let name = std::str::from_utf8(r.take(usize::from(len), "a name")?)
            .map_err(|_| "a node name that is not UTF-8".to_string())?;
        names.push(name.to_string());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(active: u32) -> NodeReport {
        NodeReport {
            active,
            finished: u64::from(active) * 10,
            latency_us: 2000,
            ejected: false,
        }
    }

    fn decoded(datagrams: &[Vec<u8>]) -> Vec<Entries> {
        datagrams.iter().map(|d| decode(d).unwrap().1).collect()
    }

    #[test]
    fn a_table_is_sorted_by_name_and_named_by_its_names_alone() {
        let a = Table::new(["web-2", "web-1", &"x".repeat(256)]);
        assert_eq!((a.order.clone(), a.unnamed), (vec![1, 0], 1));
        let b = Table::new(["web-1", "web-2"]);
        assert_eq!(
            a.id, b.id,
            "the same names in another order: the same table"
        );
        assert_ne!(a.id, Table::new(["web-1", "web-3"]).id);
        assert_ne!(Table::new(["ab", "c"]).id, Table::new(["a", "bc"]).id);
    }

    #[test]
    fn a_full_round_is_names_and_counts_and_another_only_what_changed() {
        let table = Table::new(["web-1", "web-2", "wéb-3"]);
        let mut reports = vec![report(3), report(0), report(1)];
        reports[1].ejected = true;
        reports[1].finished = u64::MAX;
        reports[1].latency_us = u32::MAX;
        let names = Entries::Names(vec!["web-1".into(), "web-2".into(), "wéb-3".into()]);
        for (seq, previous) in [
            (1, Some(&reports[..])),
            (40, Some(&reports[..])),
            (42, None),
        ] {
            let full = encode(7, seq, &table, &reports, previous);
            assert_eq!(
                decoded(&full),
                [names.clone(), Entries::Counts(reports.clone())],
                "round {seq}"
            );
        }
        let (header, _) = decode(&encode(7, 42, &table, &reports, None)[1]).unwrap();
        let expected = Header {
            boot: 7,
            seq: 42,
            table: table.id,
            total: 3,
            first: 0,
        };
        assert_eq!(header, expected);
        // Round 42 after round 41: nothing changed, one empty datagram (the peer is alive).
        let idle = encode(7, 42, &table, &reports, Some(&reports));
        assert_eq!(decoded(&idle), [Entries::Changes(Vec::new())]);
        assert!(idle[0].len() <= HEADER);
        // Nodes 0 and 2 changed: only they go, by position.
        let mut next = reports.clone();
        next[0].active = 4;
        next[2].finished += 1;
        let changes = encode(7, 43, &table, &next, Some(&reports));
        assert_eq!(
            decoded(&changes),
            [Entries::Changes(vec![(0, next[0]), (2, next[2])])]
        );
    }

    #[test]
    fn a_large_round_is_split_into_datagrams_that_each_fit_and_decode() {
        let names: Vec<String> = (0..1000).map(|i| format!("node-{i:04}")).collect();
        let table = Table::new(names.iter().map(String::as_str));
        let reports: Vec<NodeReport> = (0..1000).map(|i| report(i * 1000)).collect();
        let datagrams = encode(1, 5, &table, &reports, None);
        assert!(datagrams.len() > 2);
        let (mut counts, mut next) = (Vec::new(), 0);
        for (i, d) in datagrams.iter().enumerate() {
            assert!(d.len() <= MAX_DATAGRAM, "datagram {i}: {} bytes", d.len());
            if let (h, Entries::Counts(r)) = decode(d).unwrap() {
                assert_eq!((h.first, h.total), (next, 1000), "datagram {i}");
                next += r.len() as u32;
                counts.extend(r);
            }
        }
        assert_eq!(counts, reports);
        // Every node changed: the changes fit and come back in order too.
        let previous: Vec<NodeReport> = reports.iter().map(|_| report(7)).collect();
        let changes = encode(1, 6, &table, &reports, Some(&previous));
        assert!(changes.len() > 1);
        let back: Vec<(u32, NodeReport)> = (decoded(&changes).into_iter())
            .flat_map(|e| match e {
                Entries::Changes(c) => c,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            back,
            reports
                .iter()
                .copied()
                .enumerate()
                .map(|(p, r)| (p as u32, r))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn malformed_datagrams_are_refused_with_a_reason() {
        let table = Table::new(["a"]);
        let full = encode(1, 1, &table, &[report(1)], None);
        let (names, good) = (&full[0], &full[1]);
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "cut short"),
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "not a Capstan"),
            (good[..good.len() - 1].to_vec(), "cut short"),
            ([good.as_slice(), b"x"].concat(), "after the last entry"),
            (vec![0u8; MAX_DATAGRAM + 1], "more than"),
        ];
        let mut version = good.clone();
        version[4] = 9;
        cases.push((version, "version 9"));
        let mut kind = good.clone();
        kind[HEADER - 7] = 7;
        cases.push((kind, "unknown kind 7"));
        let mut past = good.clone();
        past[HEADER - 6..HEADER - 2].copy_from_slice(&1u32.to_be_bytes());
        cases.push((past, "past the table"));
        let mut long = good[..HEADER].to_vec();
        long.extend_from_slice(&[0xff; 11]);
        cases.push((long, "longer than 64 bits"));
        let mut wide = good[..HEADER].to_vec();
        wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0]);
        cases.push((wide, "over 33 bits"));
        let mut name = names.clone();
        name[HEADER + 1] = 0xff;
        cases.push((name, "UTF-8"));
        let changes = &encode(1, 5, &table, &[report(2)], Some(&[report(1)]))[0];
        let mut beyond = changes.clone();
        beyond[HEADER] = 1; // a gap of 1 from position 0: position 1 of a table of 1
        cases.push((beyond, "position 1 past the table's 1"));
        for (bytes, why) in cases {
            let e = decode(&bytes).unwrap_err();
            assert!(e.contains(why), "{bytes:?}: {e} (expected {why})");
        }
    }
}
