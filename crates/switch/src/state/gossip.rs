//! The tier's shared view of the nodes: what each switch tells its peers about every node (its
//! own active requests on it, requests finished, a recent latency, whether it has the node out),
//! the datagrams that carry it, and what a switch keeps of its peers' reports and sums into the
//! policy view's tier-wide fields ([`capstan_core::TierState`]).
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
//! are dropped and counted ([`Taken::Unmapped`]), not guessed.
//!
//! The datagram (integers big-endian; `varint` is LEB128), at most [`MAX_DATAGRAM`] bytes:
//!
//! ```text
//! "CPGS" version:u8 boot:u64 seq:u64 table:u64 total:u32 kind:u8 first:u32 count:u16
//! kind 0, counts: count × ( varint(active × 2 + ejected) varint(finished) varint(latency_us) )
//! kind 1, names:  count × ( name_len:u8 name:[u8; name_len] )
//! ```
//!
//! `boot` tells one run of a switch from the next (a restarted peer starts its `seq` again);
//! `seq` numbers the sender's rounds, and a report of an older round of the same run than one
//! already taken is dropped. `total` is the table's length and `first..first + count` the
//! positions the datagram holds, so each datagram is read alone.
//!
//! Everything here is pure (no sockets, no clock of its own), so it is tested directly; the
//! socket and the timer are `crate::control::gossip`'s.

use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHasher};

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

/// The most bytes a counts entry takes (three varints: 33 + 64 + 32 bits).
const MAX_COUNTS_ENTRY: usize = 5 + 10 + 5;

/// A round whose `seq` is a multiple of this also carries the table's names (as do a run's
/// first [`NAMES_FIRST`] rounds), so a peer with another node list can map positions within
/// this many periods.
pub(crate) const NAMES_EVERY: u64 = 10;

/// A run's first rounds all carry names: a peer that starts with another list learns it at once.
pub(crate) const NAMES_FIRST: u64 = 3;

/// A peer's report on a node is used for this many gossip periods after it arrived; then the
/// peer is taken to have stopped and its counts leave the sums.
pub(crate) const AGE_OUT_PERIODS: u32 = 3;

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
    names: Vec<String>,
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
}

/// Encodes one round: `reports` in `table` order. Names datagrams come first when the round
/// carries them (see [`NAMES_EVERY`]).
pub(crate) fn encode(boot: u64, seq: u64, table: &Table, reports: &[NodeReport]) -> Vec<Vec<u8>> {
    let mut datagrams = Vec::new();
    if seq <= NAMES_FIRST || seq.is_multiple_of(NAMES_EVERY) {
        encode_entries(boot, seq, table, 1, &mut datagrams, |d, p| {
            let name = table.names[p].as_bytes();
            if d.len() + 1 + name.len() > MAX_DATAGRAM {
                return false;
            }
            d.push(name.len() as u8);
            d.extend_from_slice(name);
            true
        });
    }
    encode_entries(boot, seq, table, 0, &mut datagrams, |d, p| {
        if d.len() + MAX_COUNTS_ENTRY > MAX_DATAGRAM {
            return false;
        }
        let r = &reports[p];
        put_varint(d, u64::from(r.active) << 1 | u64::from(r.ejected));
        put_varint(d, r.finished);
        put_varint(d, u64::from(r.latency_us));
        true
    });
    datagrams
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
        let mut d = Vec::with_capacity(MAX_DATAGRAM);
        d.extend_from_slice(&MAGIC);
        d.push(VERSION);
        d.extend_from_slice(&boot.to_be_bytes());
        d.extend_from_slice(&seq.to_be_bytes());
        d.extend_from_slice(&table.id.to_be_bytes());
        d.extend_from_slice(&(total as u32).to_be_bytes());
        d.push(kind);
        d.extend_from_slice(&(first as u32).to_be_bytes());
        d.extend_from_slice(&[0, 0]);
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
    if u64::from(first) + u64::from(count) > u64::from(total) {
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
        let active = r.varint(33, "an active count")?;
        reports.push(NodeReport {
            active: (active >> 1) as u32,
            ejected: active & 1 == 1,
            finished: r.varint(64, "a finished count")?,
            latency_us: r.varint(32, "a latency")? as u32,
        });
    }
    Ok(reports)
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

/// A peer's last report on one node, with when it arrived.
#[derive(Clone, Copy, Debug)]
struct Received {
    report: NodeReport,
    at: Instant,
}

/// A peer's table other than this switch's: its positions mapped to this switch's, as far as its
/// names have arrived.
#[derive(Debug)]
struct PeerTable {
    id: u64,
    /// For each of the peer's positions: this switch's position of the same name, `None` if this
    /// switch has no such node, unset until the name has arrived.
    to_own: Vec<Option<Option<u32>>>,
    missing: usize,
}

/// What one peer told this switch.
#[derive(Debug, Default)]
struct PeerReports {
    /// Its run and the latest round taken from it.
    last: Option<(u64, u64)>,
    table: Option<PeerTable>,
    /// Its last report on each node, by this switch's table position.
    nodes: Vec<Option<Received>>,
}

/// What became of a datagram given to [`SharedView::accept`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Counts taken, or names learnt.
    Used,
    /// Of an older round than one already taken from the peer.
    Old,
    /// Counts of a table this switch cannot map to its own yet (the names have not all come).
    Unmapped,
}

/// Every peer's last reports, by the peer's listener address (peers come and go with the
/// tier's discovery; this switch has no entry), each by this switch's table position.
#[derive(Debug)]
pub(crate) struct SharedView {
    own: u64,
    len: usize,
    /// This switch's table's names by name, to map another table's names.
    index: FxHashMap<String, u32>,
    peers: FxHashMap<SocketAddr, PeerReports>,
}

/// The tier-wide sums for one node, before the oldest arrival is turned into view time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sum {
    /// When the oldest report that went into the sums arrived.
    pub oldest: Instant,
    pub active: u32,
    pub own_active: u32,
    pub finished: u64,
    /// Mean of the known (non-zero) latencies, own included, milliseconds; 0 when none.
    pub latency_ms: f64,
    pub ejected: bool,
    /// Peers whose report went in (this switch not counted).
    pub peers: usize,
    /// Of those, the peers that have the node out.
    pub peers_ejected: usize,
}

impl SharedView {
    pub(crate) fn new(own: &Table) -> SharedView {
        let mut view = SharedView {
            own: 0,
            len: 0,
            index: FxHashMap::default(),
            peers: FxHashMap::default(),
        };
        view.set_table(own);
        view
    }

    /// This switch's node list changed: what peers said is by the old positions, so it is
    /// dropped (their next round, at most a period away, says it again), as are the maps of
    /// other tables to the old one.
    pub(crate) fn set_table(&mut self, own: &Table) {
        if own.id == self.own && own.len() == self.len && !self.index.is_empty() {
            return;
        }
        self.own = own.id;
        self.len = own.len();
        self.index = (own.names.iter().enumerate())
            .map(|(p, n)| (n.clone(), p as u32))
            .collect();
        for p in self.peers.values_mut() {
            p.table = None;
            p.nodes = vec![None; own.len()];
        }
    }

    /// Forgets the peers `keep` no longer names (they left the tier).
    pub(crate) fn keep_peers(&mut self, keep: impl Fn(SocketAddr) -> bool) {
        self.peers.retain(|a, _| keep(*a));
    }

    /// Takes a datagram from `peer` that arrived at `now`.
    pub(crate) fn accept(
        &mut self,
        peer: SocketAddr,
        header: Header,
        entries: Entries,
        now: Instant,
    ) -> Taken {
        let (own, len) = (self.own, self.len);
        let p = self.peers.entry(peer).or_insert_with(|| PeerReports {
            nodes: vec![None; len],
            ..PeerReports::default()
        });
        match p.last {
            Some((boot, seq)) if boot == header.boot && header.seq < seq => return Taken::Old,
            // A new run of the peer: what the old one said is void.
            Some((boot, _)) if boot != header.boot => {
                p.table = None;
                p.nodes.iter_mut().for_each(|n| *n = None);
            }
            _ => {}
        }
        p.last = Some((header.boot, header.seq));
        match entries {
            Entries::Names(names) if header.table != own => {
                learn_names(p, &self.index, header, names);
                Taken::Used
            }
            Entries::Names(_) => Taken::Used,
            Entries::Counts(reports) => take_counts(p, (own, len), header, reports, now),
        }
    }

    /// The tier-wide sums for every node of this switch's table, in table order: `own[p]` (this
    /// switch's live counts) plus the last report of every peer for which `live` holds and
    /// whose report is at most `max_age` old at `now`; `None` where no peer's report counts
    /// (the node's tier state is then unknown).
    pub(crate) fn sums(
        &self,
        own: &[NodeReport],
        live: impl Fn(SocketAddr) -> bool,
        now: Instant,
        max_age: Duration,
    ) -> Vec<Option<Sum>> {
        let peers: Vec<&PeerReports> = (self.peers.iter())
            .filter(|(address, _)| live(**address))
            .map(|(_, p)| p)
            .collect();
        (own.iter().enumerate())
            .map(|(position, own)| {
                let reports = (peers.iter())
                    .filter_map(|p| p.nodes.get(position).copied().flatten())
                    .filter(|got| now.saturating_duration_since(got.at) <= max_age);
                sum(own, reports, now)
            })
            .collect()
    }
}

/// Maps the peer's positions named in `names` to this switch's.
fn learn_names(
    p: &mut PeerReports,
    index: &FxHashMap<String, u32>,
    header: Header,
    names: Vec<String>,
) {
    let total = header.total as usize;
    if !matches!(&p.table, Some(t) if t.id == header.table) {
        p.table = Some(PeerTable {
            id: header.table,
            to_own: vec![None; total],
            missing: total,
        });
    }
    let table = p.table.as_mut().expect("set above");
    for (i, name) in names.iter().enumerate() {
        let slot = &mut table.to_own[header.first as usize + i];
        if slot.is_none() {
            table.missing -= 1;
        }
        *slot = Some(index.get(name.as_str()).copied());
    }
}

/// Stores a counts datagram's reports by this switch's positions.
fn take_counts(
    p: &mut PeerReports,
    (own, len): (u64, usize),
    header: Header,
    reports: Vec<NodeReport>,
    now: Instant,
) -> Taken {
    let first = header.first as usize;
    if header.table == own && header.total as usize == len {
        for (i, report) in reports.into_iter().enumerate() {
            p.nodes[first + i] = Some(Received { report, at: now });
        }
        return Taken::Used;
    }
    match &p.table {
        Some(t)
            if t.id == header.table
                && t.missing == 0
                && t.to_own.len() == header.total as usize =>
        {
            for (i, report) in reports.into_iter().enumerate() {
                if let Some(Some(position)) = t.to_own[first + i] {
                    p.nodes[position as usize] = Some(Received { report, at: now });
                }
            }
            Taken::Used
        }
        _ => Taken::Unmapped,
    }
}

/// `own` plus `reports`; `None` without any report.
fn sum(own: &NodeReport, reports: impl Iterator<Item = Received>, now: Instant) -> Option<Sum> {
    let mut sum = Sum {
        oldest: now,
        active: own.active,
        own_active: own.active,
        finished: own.finished,
        latency_ms: 0.0,
        ejected: own.ejected,
        peers: 0,
        peers_ejected: 0,
    };
    let (mut latency_total, mut latencies) = (u64::from(own.latency_us), 0u32);
    if own.latency_us > 0 {
        latencies += 1;
    }
    for got in reports {
        let r = &got.report;
        sum.peers += 1;
        sum.oldest = sum.oldest.min(got.at);
        sum.active = sum.active.saturating_add(r.active);
        sum.finished = sum.finished.saturating_add(r.finished);
        sum.ejected |= r.ejected;
        sum.peers_ejected += usize::from(r.ejected);
        if r.latency_us > 0 {
            latency_total += u64::from(r.latency_us);
            latencies += 1;
        }
    }
    if latencies > 0 {
        sum.latency_ms = latency_total as f64 / f64::from(latencies) / 1000.0;
    }
    (sum.peers > 0).then_some(sum)
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

    fn counts(datagrams: &[Vec<u8>]) -> Vec<NodeReport> {
        let mut back = Vec::new();
        for d in datagrams {
            if let (_, Entries::Counts(r)) = decode(d).unwrap() {
                back.extend(r);
            }
        }
        back
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
    fn a_round_decodes_as_it_was_encoded_and_names_come_when_due() {
        let table = Table::new(["web-1", "wéb-2"]);
        let mut reports = vec![report(3), report(0)];
        reports[1].ejected = true;
        reports[1].finished = u64::MAX;
        reports[1].latency_us = u32::MAX;
        let datagrams = encode(7, 42, &table, &reports);
        assert_eq!(datagrams.len(), 1, "round 42 carries no names");
        let (header, back) = decode(&datagrams[0]).unwrap();
        let expected = Header {
            boot: 7,
            seq: 42,
            table: table.id,
            total: 2,
            first: 0,
        };
        assert_eq!(header, expected);
        assert_eq!(back, Entries::Counts(reports.clone()));
        for seq in [1, 3, 40] {
            let with_names = encode(7, seq, &table, &reports);
            assert_eq!(with_names.len(), 2, "round {seq}");
            let names = decode(&with_names[0]).unwrap().1;
            assert_eq!(names, Entries::Names(vec!["web-1".into(), "wéb-2".into()]));
        }
    }

    #[test]
    fn a_large_round_is_split_into_datagrams_that_each_fit_and_decode() {
        let names: Vec<String> = (0..1000).map(|i| format!("node-{i:04}")).collect();
        let table = Table::new(names.iter().map(String::as_str));
        let reports: Vec<NodeReport> = (0..1000).map(|i| report(i * 1000)).collect();
        let datagrams = encode(1, 5, &table, &reports);
        assert!(datagrams.len() > 1);
        let mut next = 0;
        for (i, d) in datagrams.iter().enumerate() {
            assert!(d.len() <= MAX_DATAGRAM, "datagram {i}: {} bytes", d.len());
            let (h, _) = decode(d).unwrap();
            assert_eq!((h.first, h.total), (next, 1000), "datagram {i}");
            next += match decode(d).unwrap().1 {
                Entries::Counts(r) => r.len() as u32,
                Entries::Names(n) => n.len() as u32,
            };
        }
        assert_eq!(counts(&datagrams), reports);
    }

    #[test]
    fn malformed_datagrams_are_refused_with_a_reason() {
        let table = Table::new(["a"]);
        let good = &encode(1, 5, &table, &[report(1)])[0];
        let names = &encode(1, 1, &table, &[report(1)])[0];
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
        for (bytes, why) in cases {
            let e = decode(&bytes).unwrap_err();
            assert!(e.contains(why), "{bytes:?}: {e} (expected {why})");
        }
    }

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 8080))
    }

    fn take_round(
        view: &mut SharedView,
        peer: SocketAddr,
        boot: u64,
        seq: u64,
        table: &Table,
        reports: &[NodeReport],
        at: Instant,
    ) -> Vec<Taken> {
        (encode(boot, seq, table, reports).iter())
            .map(|d| {
                let (h, e) = decode(d).unwrap();
                view.accept(peer, h, e, at)
            })
            .collect()
    }

    #[test]
    fn sums_add_live_fresh_peers_to_the_own_counts_and_age_out() {
        let start = Instant::now();
        let period = Duration::from_millis(100);
        let max_age = period * AGE_OUT_PERIODS;
        let table = Table::new(["web"]);
        let mut view = SharedView::new(&table);
        let own = [NodeReport {
            latency_us: 0,
            ..report(2)
        }];
        let all = |_: SocketAddr| true;
        assert_eq!(
            view.sums(&own, all, start, max_age),
            [None],
            "no peer: unknown"
        );
        take_round(&mut view, peer(1), 9, 5, &table, &[report(5)], start);
        let mut ejected = report(7);
        ejected.ejected = true;
        ejected.latency_us = 4000;
        let later = start + period;
        take_round(&mut view, peer(2), 3, 5, &table, &[ejected], later);
        let sum = view.sums(&own, all, later, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.own_active, sum.peers), (14, 2, 2));
        assert_eq!(sum.finished, 20 + 50 + 70);
        assert_eq!(sum.oldest, start, "the age is the oldest contribution's");
        assert!(sum.ejected);
        assert_eq!(sum.peers_ejected, 1);
        assert_eq!(sum.latency_ms, 3.0, "mean of the known latencies");
        // Peer 2 taken out by its health checks: only peer 1 counts.
        let sum = view.sums(&own, |a| a != peer(2), later, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.ejected), (7, false));
        // Peer 1's report is older than 3 periods: it ages out; peer 2's is still in.
        let aged = start + max_age + Duration::from_millis(1);
        let sum = view.sums(&own, all, aged, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (9, 1, later));
        let gone = later + max_age + Duration::from_millis(1);
        assert_eq!(view.sums(&own, all, gone, max_age), [None]);
    }

    #[test]
    fn an_older_round_is_dropped_and_a_restarted_peer_starts_again() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let table = Table::new(["db", "web"]);
        let mut view = SharedView::new(&table);
        let own = [report(0), report(0)];
        let sums = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        take_round(
            &mut view,
            peer(1),
            1,
            10,
            &table,
            &[report(1), report(4)],
            now,
        );
        assert_eq!(
            take_round(
                &mut view,
                peer(1),
                1,
                9,
                &table,
                &[report(9), report(99)],
                now
            ),
            [Taken::Old]
        );
        assert_eq!(sums(&view), [Some(1), Some(4)]);
        // The peer restarted: its round 1 (names and counts) is taken though 1 < 10.
        let restarted = take_round(
            &mut view,
            peer(1),
            2,
            1,
            &table,
            &[report(2), report(3)],
            now,
        );
        assert_eq!(restarted, [Taken::Used, Taken::Used]);
        assert_eq!(sums(&view), [Some(2), Some(3)]);
        let (h, _) = decode(&encode(3, 20, &table, &[report(0), report(0)])[1]).unwrap();
        let only_db = Entries::Counts(vec![report(6)]);
        assert_eq!(view.accept(peer(1), h, only_db, now), Taken::Used);
        assert_eq!(
            sums(&view),
            [Some(6), None],
            "a third run: only what it said counts"
        );
        // A peer that left the tier is forgotten.
        view.keep_peers(|a| a != peer(1));
        assert_eq!(sums(&view), [None, None]);
    }

    #[test]
    fn a_peer_with_another_node_list_is_mapped_by_name_once_its_names_arrive() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let own_table = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&own_table);
        let own = [report(0), report(0), report(0)];
        // The peer has b, c and d (no a): another table.
        let theirs = Table::new(["d", "c", "b"]);
        let reports = [report(20), report(30), report(40)]; // b, c, d in its table order
        let actives = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        // Round 5 has no names: its counts cannot be placed yet.
        assert_eq!(
            take_round(&mut view, peer(1), 1, 5, &theirs, &reports, now),
            [Taken::Unmapped]
        );
        assert_eq!(actives(&view), [None, None, None]);
        // Round 10 brings the names first, then counts that land by name; d is not ours.
        let taken = take_round(&mut view, peer(1), 1, 10, &theirs, &reports, now);
        assert_eq!(taken, [Taken::Used, Taken::Used]);
        assert_eq!(actives(&view), [None, Some(20), Some(30)]);
        // This switch's list changes: what was said by the old positions is dropped.
        let grown = Table::new(["a", "b", "c", "d"]);
        view.set_table(&grown);
        let own4 = [report(0); 4];
        assert!(view
            .sums(&own4, |_| true, now, max_age)
            .iter()
            .all(Option::is_none));
        // Now the lists are the same: the positions are taken as they are, names or not.
        let same = [report(1), report(2), report(3), report(4)];
        assert_eq!(
            take_round(&mut view, peer(1), 1, 11, &grown, &same, now),
            [Taken::Used]
        );
        let sums = view.sums(&own4, |_| true, now, max_age);
        assert_eq!(
            sums.iter().map(|s| s.unwrap().active).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
    }
}
