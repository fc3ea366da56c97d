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
//! **Changes, not every count.** Like HAProxy's peers protocol, which pushes only the stick-table
//! entries that changed, a round sends every node's counts only every [`NAMES_EVERY`]th time
//! (and in a run's first rounds); in between it sends the nodes whose counts changed since the
//! previous round, each with its position — at least one datagram, so an idle round still says
//! "alive". A receiver keeps a peer's last counts of every node and judges their age by when it
//! last heard the peer, not by when a node's counts last changed. The work is then bounded by
//! the requests placed per period rather than by the nodes: an idle tier of 16 switches with
//! 1,000 nodes each sends one small datagram per peer per round. A lost datagram leaves the
//! counts it carried stale until the next full round, at most [`NAMES_EVERY`] periods later.
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
    /// When a datagram of it was last taken: its counts are as old as that.
    heard: Option<Instant>,
    /// The table its last datagram spoke of: when it is this switch's own, the peer maps this
    /// switch's positions without names.
    speaks_of: Option<u64>,
    table: Option<PeerTable>,
    /// Its last counts of each node, by this switch's table position.
    nodes: Vec<Option<NodeReport>>,
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

    /// Whether `peer` is known to have the same table as this switch (its last datagram spoke
    /// of it): then it needs no names to map this switch's counts. A full round sends names
    /// only to the other peers (those not heard yet, or with another node list), so in a tier
    /// whose switches all have the same nodes the names stop after the first exchange (at
    /// 1,000 nodes they were two thirds of the datagrams).
    pub(crate) fn has_our_table(&self, peer: SocketAddr) -> bool {
        (self.peers.get(&peer)).is_some_and(|p| p.speaks_of == Some(self.own))
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
        p.heard = Some(now);
        p.speaks_of = Some(header.table);
        match entries {
            Entries::Names(names) if header.table != own => {
                learn_names(p, &self.index, header, names);
                Taken::Used
            }
            Entries::Names(_) => Taken::Used,
            Entries::Counts(reports) => {
                let first = header.first;
                let at = (0..).map(|i| first + i).zip(reports);
                take_counts(p, (own, len), header, at)
            }
            Entries::Changes(changes) => take_counts(p, (own, len), header, changes.into_iter()),
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
        let fresh = |p: &&&PeerReports| {
            p.heard
                .is_some_and(|at| now.saturating_duration_since(at) <= max_age)
        };
        let peers: Vec<(&PeerReports, Instant)> = (peers.iter())
            .filter(fresh)
            .map(|p| (*p, p.heard.unwrap_or(now)))
            .collect();
        (own.iter().enumerate())
            .map(|(position, own)| {
                let reports = (peers.iter()).filter_map(|(p, at)| {
                    let report = p.nodes.get(position).copied().flatten()?;
                    Some((report, *at))
                });
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

/// Stores a datagram's counts, each at the sender's table position given, by this switch's
/// positions.
fn take_counts(
    p: &mut PeerReports,
    (own, len): (u64, usize),
    header: Header,
    reports: impl Iterator<Item = (u32, NodeReport)>,
) -> Taken {
    if header.table == own && header.total as usize == len {
        for (position, report) in reports {
            p.nodes[position as usize] = Some(report);
        }
        return Taken::Used;
    }
    match &p.table {
        Some(t)
            if t.id == header.table
                && t.missing == 0
                && t.to_own.len() == header.total as usize =>
        {
            for (position, report) in reports {
                if let Some(Some(own)) = t.to_own[position as usize] {
                    p.nodes[own as usize] = Some(report);
                }
            }
            Taken::Used
        }
        _ => Taken::Unmapped,
    }
}

/// `own` plus `reports`, each with when its peer was last heard; `None` without any report.
fn sum(
    own: &NodeReport,
    reports: impl Iterator<Item = (NodeReport, Instant)>,
    now: Instant,
) -> Option<Sum> {
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
    for (r, at) in reports {
        sum.peers += 1;
        sum.oldest = sum.oldest.min(at);
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

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 8080))
    }

    /// Round `seq` of `reports` (after `previous`) from `peer`, taken at `at`.
    struct Round<'a> {
        peer: SocketAddr,
        boot: u64,
        seq: u64,
        table: &'a Table,
        reports: &'a [NodeReport],
        previous: Option<&'a [NodeReport]>,
    }

    fn take(view: &mut SharedView, r: Round, at: Instant) -> Vec<Taken> {
        (encode(r.boot, r.seq, r.table, r.reports, r.previous).iter())
            .map(|d| {
                let (h, e) = decode(d).unwrap();
                view.accept(r.peer, h, e, at)
            })
            .collect()
    }

    fn full<'a>(
        peer: SocketAddr,
        boot: u64,
        table: &'a Table,
        reports: &'a [NodeReport],
    ) -> Round<'a> {
        Round {
            peer,
            boot,
            seq: 10,
            table,
            reports,
            previous: None,
        }
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
        take(&mut view, full(peer(1), 9, &table, &[report(5)]), start);
        let mut ejected = report(7);
        ejected.ejected = true;
        ejected.latency_us = 4000;
        let later = start + period;
        take(&mut view, full(peer(2), 3, &table, &[ejected]), later);
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
        // Peer 1 silent for more than 3 periods: it ages out; peer 2 is still in.
        let aged = start + max_age + Duration::from_millis(1);
        let sum = view.sums(&own, all, aged, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (9, 1, later));
        // An idle round of peer 1 (nothing changed) makes its counts fresh again.
        let five = [report(5)];
        let idle = Round {
            seq: 11,
            previous: Some(&five),
            ..full(peer(1), 9, &table, &five)
        };
        assert_eq!(take(&mut view, idle, aged), [Taken::Used]);
        let sum = view.sums(&own, all, aged, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (14, 2, later));
        let gone = aged + max_age + Duration::from_millis(1);
        assert_eq!(view.sums(&own, all, gone, max_age), [None]);
    }

    /// Names go only to peers not known to share this switch's table; a full round without
    /// its names datagrams still carries every count, which a peer of the same table maps.
    #[test]
    fn names_are_for_peers_of_another_or_an_unknown_table() {
        let now = Instant::now();
        let ours = Table::new(["a", "b"]);
        let theirs = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&ours);
        assert!(!view.has_our_table(peer(1)), "not heard yet");
        let reports = [report(3), report(4)];
        let round = encode(1, 10, &ours, &reports, None);
        assert!(round.iter().any(|d| is_names(d)) && !round.iter().all(|d| is_names(d)));
        // The same table, its names left out: every count taken.
        let without_names: Vec<Vec<u8>> = round.into_iter().filter(|d| !is_names(d)).collect();
        for d in &without_names {
            let (h, e) = decode(d).unwrap();
            assert_eq!(view.accept(peer(1), h, e, now), Taken::Used);
        }
        assert!(view.has_our_table(peer(1)));
        let sums = view.sums(&[report(0); 2], |_| true, now, Duration::from_secs(1));
        let actives: Vec<u32> = sums.iter().map(|s| s.unwrap().active).collect();
        assert_eq!(actives, [3, 4]);
        // Another table: names needed.
        let three = [report(1); 3];
        take(&mut view, full(peer(2), 1, &theirs, &three), now);
        assert!(!view.has_our_table(peer(2)));
        // A reload that changes this switch's own table: every peer needs names again.
        view.set_table(&theirs);
        assert!(!view.has_our_table(peer(1)));
        assert!(view.has_our_table(peer(2)));
    }

    #[test]
    fn changes_land_on_their_nodes_and_leave_the_others_as_they_were() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let table = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&table);
        let own = [report(0); 3];
        let actives = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        let first = [report(1), report(2), report(3)];
        take(&mut view, full(peer(1), 1, &table, &first), now);
        let second = [report(1), report(9), report(3)];
        let changes = Round {
            seq: 11,
            previous: Some(&first),
            ..full(peer(1), 1, &table, &second)
        };
        assert_eq!(take(&mut view, changes, now), [Taken::Used]);
        assert_eq!(actives(&view), [Some(1), Some(9), Some(3)]);
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
        take(
            &mut view,
            full(peer(1), 1, &table, &[report(1), report(4)]),
            now,
        );
        let stale = [report(9), report(99)];
        let older = Round {
            seq: 9,
            ..full(peer(1), 1, &table, &stale)
        };
        assert_eq!(take(&mut view, older, now), [Taken::Old, Taken::Old]);
        assert_eq!(sums(&view), [Some(1), Some(4)]);
        // The peer restarted: its round 1 is taken though 1 < 10.
        let anew = [report(2), report(3)];
        let restarted = Round {
            seq: 1,
            ..full(peer(1), 2, &table, &anew)
        };
        assert_eq!(take(&mut view, restarted, now), [Taken::Used, Taken::Used]);
        assert_eq!(sums(&view), [Some(2), Some(3)]);
        // A third run says only db: the second run's web is gone.
        let (h, _) = decode(&encode(3, 20, &table, &[report(0), report(0)], None)[1]).unwrap();
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
        let before = [report(0); 3];
        let actives = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        // Round 5 carries changes but no names: they cannot be placed yet.
        let unnamed = Round {
            peer: peer(1),
            boot: 1,
            seq: 5,
            table: &theirs,
            reports: &reports,
            previous: Some(&before),
        };
        assert_eq!(take(&mut view, unnamed, now), [Taken::Unmapped]);
        assert_eq!(actives(&view), [None, None, None]);
        // A full round brings the names first, then counts that land by name; d is not ours.
        let taken = take(&mut view, full(peer(1), 1, &theirs, &reports), now);
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
        let changes = Round {
            peer: peer(1),
            boot: 1,
            seq: 11,
            table: &grown,
            reports: &same,
            previous: Some(&[report(0); 4]),
        };
        assert_eq!(take(&mut view, changes, now), [Taken::Used]);
        let sums = view.sums(&own4, |_| true, now, max_age);
        assert_eq!(
            sums.iter().map(|s| s.unwrap().active).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
    }
}
