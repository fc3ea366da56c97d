//! The tier's shared view of the nodes: what each switch tells its peers about every node (its
//! own active requests on it, requests finished, a recent latency, whether it has the node out),
//! the datagram that carries it, and what a switch keeps of its peers' reports and sums into the
//! policy view's tier-wide fields ([`capstan_core::TierState`]).
//!
//! Each switch pushes its **own** counts to every other peer once per `tier.gossip_period` (full
//! mesh, no relaying: a report is one hop old at most, and a datagram holds only the sender's
//! own nodes, so its size does not grow with the tier). Nodes are named, not numbered: peers may
//! list them in other orders, or briefly disagree on the list during a reload.
//!
//! The datagram (all integers big-endian), at most [`MAX_DATAGRAM`] bytes:
//!
//! ```text
//! "CPGS" version:u8 boot:u64 seq:u64 part:u16 parts:u16 count:u16
//! count × ( name_len:u8 name:[u8; name_len] active:u32 finished:u64 latency_us:u32 flags:u8 )
//! ```
//!
//! `boot` tells one run of a switch from the next (a restarted peer starts its `seq` again);
//! `seq` numbers the sender's rounds, and a report of an older round of the same run than one
//! already taken is dropped. A round with more nodes than one datagram holds is sent in `parts`
//! datagrams, each decodable alone. Flag bit 0: the sender has the node out (ejected, backed off
//! or failing its checks); other bits must be 0.
//!
//! Everything here is pure (no sockets, no clock of its own), so it is tested directly; the
//! socket and the timer are `crate::control::gossip`'s.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What a datagram starts with.
pub(crate) const MAGIC: [u8; 4] = *b"CPGS";

/// The encoding's version; a datagram of another version is malformed to this switch.
pub(crate) const VERSION: u8 = 1;

/// The largest datagram sent or taken: fits one packet on any IPv4 or IPv6 path (IPv6's
/// minimum MTU is 1,280 bytes, less its 48 bytes of IP and UDP headers), so a report is never
/// fragmented on a real network.
pub(crate) const MAX_DATAGRAM: usize = 1200;

/// Bytes of the header before the entries.
const HEADER: usize = 4 + 1 + 8 + 8 + 2 + 2 + 2;

/// Bytes of an entry besides its name.
const ENTRY_FIXED: usize = 1 + 4 + 8 + 4 + 1;

/// A peer's report on a node is used for this many gossip periods after it arrived; then the
/// peer is taken to have stopped and its counts leave the sums.
pub(crate) const AGE_OUT_PERIODS: u32 = 3;

/// One switch's counts for one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeReport {
    pub name: String,
    /// Requests the sender has on the node (in flight and waiting in its admission queue).
    pub active: u32,
    /// Responses the sender has received from the node since it started.
    pub finished: u64,
    /// The sender's recent latency of the node's requests, microseconds (0: none yet).
    pub latency_us: u32,
    /// The sender has the node out (outlier ejection, passive back-off, failed checks).
    pub ejected: bool,
}

/// Which round of which run of its sender a datagram belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub boot: u64,
    pub seq: u64,
    pub part: u16,
    pub parts: u16,
}

/// Encodes one round as datagrams of at most [`MAX_DATAGRAM`] bytes. Nodes whose name is longer
/// than 255 bytes are left out (no peer could learn of them); the number left out is returned.
pub(crate) fn encode(boot: u64, seq: u64, reports: &[NodeReport]) -> (Vec<Vec<u8>>, usize) {
    let mut bodies: Vec<(u16, Vec<u8>)> = vec![(0, Vec::new())];
    let mut skipped = 0;
    for r in reports {
        let name = r.name.as_bytes();
        let Ok(len) = u8::try_from(name.len()) else {
            skipped += 1;
            continue;
        };
        let size = ENTRY_FIXED + name.len();
        let last = bodies.last_mut().expect("one body at least");
        if HEADER + last.1.len() + size > MAX_DATAGRAM || last.0 == u16::MAX {
            bodies.push((0, Vec::new()));
        }
        let (count, body) = bodies.last_mut().expect("one body at least");
        body.push(len);
        body.extend_from_slice(name);
        body.extend_from_slice(&r.active.to_be_bytes());
        body.extend_from_slice(&r.finished.to_be_bytes());
        body.extend_from_slice(&r.latency_us.to_be_bytes());
        body.push(u8::from(r.ejected));
        *count += 1;
    }
    let parts = u16::try_from(bodies.len()).unwrap_or(u16::MAX);
    let datagrams = (bodies.into_iter().take(usize::from(parts)).enumerate())
        .map(|(part, (count, body))| {
            let mut d = Vec::with_capacity(HEADER + body.len());
            d.extend_from_slice(&MAGIC);
            d.push(VERSION);
            d.extend_from_slice(&boot.to_be_bytes());
            d.extend_from_slice(&seq.to_be_bytes());
            d.extend_from_slice(&(part as u16).to_be_bytes());
            d.extend_from_slice(&parts.to_be_bytes());
            d.extend_from_slice(&count.to_be_bytes());
            d.extend_from_slice(&body);
            d
        })
        .collect();
    (datagrams, skipped)
}

/// Reads big-endian integers off a datagram; every read says what was missing.
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
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_be_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Decodes one datagram; the error says what is wrong with it.
pub(crate) fn decode(datagram: &[u8]) -> Result<(Header, Vec<NodeReport>), String> {
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
    let version = r.u8("the version")?;
    if version != VERSION {
        return Err(format!("version {version}, this switch reads {VERSION}"));
    }
    let header = Header {
        boot: r.u64("the boot id")?,
        seq: r.u64("the sequence number")?,
        part: r.u16("the part")?,
        parts: r.u16("the parts")?,
    };
    if header.part >= header.parts {
        return Err(format!("part {} of {}", header.part, header.parts));
    }
    let count = r.u16("the count")?;
    let mut reports = Vec::with_capacity(usize::from(count).min(MAX_DATAGRAM / ENTRY_FIXED));
    for _ in 0..count {
        let len = r.u8("a name's length")?;
        let name = std::str::from_utf8(r.take(usize::from(len), "a name")?)
            .map_err(|_| "a node name that is not UTF-8".to_string())?;
        let report = NodeReport {
            name: name.to_string(),
            active: r.u32("an active count")?,
            finished: r.u64("a finished count")?,
            latency_us: r.u32("a latency")?,
            ejected: match r.u8("the flags")? {
                0 => false,
                1 => true,
                f => return Err(format!("unknown flags {f:#04x}")),
            },
        };
        reports.push(report);
    }
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the last entry", r.0.len()));
    }
    Ok((header, reports))
}

/// A peer's last report on one node, with when it arrived.
#[derive(Clone, Debug)]
struct Received {
    report: NodeReport,
    at: Instant,
}

/// What one peer told this switch.
#[derive(Debug, Default)]
struct PeerReports {
    /// Its run and the latest round taken from it.
    last: Option<(u64, u64)>,
    nodes: HashMap<String, Received>,
}

/// Every peer's last reports, by the peer's listener address (peers come and go with the
/// tier's discovery; this switch has no entry).
#[derive(Debug, Default)]
pub(crate) struct SharedView {
    peers: HashMap<SocketAddr, PeerReports>,
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
    /// Takes a datagram from `peer` that arrived at `now`; false (and nothing taken) when it
    /// belongs to an older round of the peer's run than one already taken.
    pub(crate) fn accept(
        &mut self,
        peer: SocketAddr,
        header: Header,
        reports: Vec<NodeReport>,
        now: Instant,
    ) -> bool {
        let p = self.peers.entry(peer).or_default();
        match p.last {
            Some((boot, seq)) if boot == header.boot && header.seq < seq => return false,
            // A new run of the peer: what the old one said is void.
            Some((boot, _)) if boot != header.boot => p.nodes.clear(),
            _ => {}
        }
        p.last = Some((header.boot, header.seq));
        for report in reports {
            let name = report.name.clone();
            p.nodes.insert(name, Received { report, at: now });
        }
        true
    }

    /// The tier-wide sums for node `own.name`: `own` (this switch's live counts) plus the last
    /// report of every peer for which `live` holds and whose report is at most `max_age` old at
    /// `now`; `None` when no peer's report counts (the node's tier state is then unknown).
    pub(crate) fn sum(
        &self,
        own: &NodeReport,
        live: impl Fn(SocketAddr) -> bool,
        now: Instant,
        max_age: Duration,
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
        for (&address, p) in &self.peers {
            let Some(got) = p.nodes.get(&own.name) else {
                continue;
            };
            if !live(address) || now.saturating_duration_since(got.at) > max_age {
                continue;
            }
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

    /// Forgets reports older than `max_age` at `now`, so a node no peer names any more does
    /// not stay in memory.
    pub(crate) fn forget_older_than(&mut self, now: Instant, max_age: Duration) {
        for p in self.peers.values_mut() {
            p.nodes
                .retain(|_, got| now.saturating_duration_since(got.at) <= max_age);
        }
    }

    /// Forgets the peers `keep` no longer names (they left the tier).
    pub(crate) fn keep_peers(&mut self, keep: impl Fn(SocketAddr) -> bool) {
        self.peers.retain(|a, _| keep(*a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, active: u32) -> NodeReport {
        NodeReport {
            name: name.into(),
            active,
            finished: u64::from(active) * 10,
            latency_us: 2000,
            ejected: false,
        }
    }

    #[test]
    fn a_round_decodes_as_it_was_encoded() {
        let mut reports = vec![report("web-1", 3), report("wéb-2", 0)];
        reports[1].ejected = true;
        reports[1].finished = u64::MAX;
        let (datagrams, skipped) = encode(7, 42, &reports);
        assert_eq!((datagrams.len(), skipped), (1, 0));
        let (header, back) = decode(&datagrams[0]).unwrap();
        let expected = Header {
            boot: 7,
            seq: 42,
            part: 0,
            parts: 1,
        };
        assert_eq!(header, expected);
        assert_eq!(back, reports);
    }

    #[test]
    fn a_large_round_is_split_into_datagrams_that_each_fit_and_decode() {
        let reports: Vec<NodeReport> = (0..1000)
            .map(|i| report(&format!("node-{i:04}"), i))
            .collect();
        let long = NodeReport {
            name: "x".repeat(256),
            ..NodeReport::default()
        };
        let mut with_long = reports.clone();
        with_long.push(long);
        let (datagrams, skipped) = encode(1, 2, &with_long);
        assert_eq!(skipped, 1, "a name over 255 bytes is left out");
        assert!(datagrams.len() > 1);
        let mut back = Vec::new();
        for (i, d) in datagrams.iter().enumerate() {
            assert!(d.len() <= MAX_DATAGRAM, "datagram {i}: {} bytes", d.len());
            let (h, r) = decode(d).unwrap();
            assert_eq!((h.part as usize, h.parts as usize), (i, datagrams.len()));
            back.extend(r);
        }
        assert_eq!(back, reports);
    }

    #[test]
    fn malformed_datagrams_are_refused_with_a_reason() {
        let (datagrams, _) = encode(1, 1, &[report("a", 1)]);
        let good = &datagrams[0];
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
        let mut part = good.clone();
        part[21..23].copy_from_slice(&5u16.to_be_bytes());
        cases.push((part, "part 5 of 1"));
        let mut flags = good.clone();
        *flags.last_mut().unwrap() = 0x80;
        cases.push((flags, "unknown flags"));
        let mut name = good.clone();
        name[HEADER + 1] = 0xff;
        cases.push((name, "UTF-8"));
        let mut count = good.clone();
        count[25..27].copy_from_slice(&u16::MAX.to_be_bytes());
        cases.push((count, "cut short"));
        for (bytes, why) in cases {
            let e = decode(&bytes).unwrap_err();
            assert!(e.contains(why), "{bytes:?}: {e} (expected {why})");
        }
    }

    fn header(boot: u64, seq: u64) -> Header {
        Header {
            boot,
            seq,
            part: 0,
            parts: 1,
        }
    }

    #[test]
    fn sums_add_live_fresh_peers_to_the_own_counts_and_age_out() {
        let start = Instant::now();
        let period = Duration::from_millis(100);
        let max_age = period * AGE_OUT_PERIODS;
        let mut view = SharedView::default();
        let own = NodeReport {
            latency_us: 0,
            ..report("web", 2)
        };
        let all = |_: SocketAddr| true;
        assert_eq!(
            view.sum(&own, all, start, max_age),
            None,
            "no peer: unknown"
        );
        assert!(view.accept(peer(1), header(9, 1), vec![report("web", 5)], start));
        let mut ejected = report("web", 7);
        ejected.ejected = true;
        ejected.latency_us = 4000;
        let later = start + period;
        assert!(view.accept(peer(2), header(3, 1), vec![ejected], later));
        let sum = view.sum(&own, all, later, max_age).unwrap();
        assert_eq!((sum.active, sum.own_active, sum.peers), (14, 2, 2));
        assert_eq!(sum.finished, 20 + 50 + 70);
        assert_eq!(sum.oldest, start, "the age is the oldest contribution's");
        assert!(sum.ejected);
        assert_eq!(sum.peers_ejected, 1);
        assert_eq!(sum.latency_ms, 3.0, "mean of the known latencies");
        // Peer 2 taken out by its health checks: only peer 1 counts.
        let sum = view.sum(&own, |a| a != peer(2), later, max_age).unwrap();
        assert_eq!((sum.active, sum.ejected), (7, false));
        // Peer 1's report is older than 3 periods: it ages out; peer 2's is still in.
        let aged = start + max_age + Duration::from_millis(1);
        let sum = view.sum(&own, all, aged, max_age).unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (9, 1, later));
        // Both aged out: unknown again, and forgotten.
        let gone = later + max_age + Duration::from_millis(1);
        assert_eq!(view.sum(&own, all, gone, max_age), None);
        view.forget_older_than(gone, max_age);
        assert!(view.peers.values().all(|p| p.nodes.is_empty()));
        view.keep_peers(|a| a == peer(1));
        assert_eq!(view.peers.len(), 1, "a peer that left is forgotten");
    }

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 8080))
    }

    #[test]
    fn an_older_round_is_dropped_and_a_restarted_peer_starts_again() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let mut view = SharedView::default();
        let own = report("web", 0);
        assert!(view.accept(peer(1), header(1, 10), vec![report("web", 4)], now));
        assert!(!view.accept(peer(1), header(1, 9), vec![report("web", 99)], now));
        // Another part of the same round is taken.
        assert!(view.accept(peer(1), header(1, 10), vec![report("db", 1)], now));
        assert_eq!(view.sum(&own, |_| true, now, max_age).unwrap().active, 4);
        // The peer restarted: its round 1 is newer than the old run's 10, the old nodes go.
        assert!(view.accept(peer(1), header(2, 1), vec![report("web", 1)], now));
        assert_eq!(view.sum(&own, |_| true, now, max_age).unwrap().active, 1);
        assert_eq!(view.sum(&report("db", 0), |_| true, now, max_age), None);
    }
}
