//! The lookups: raw queries through hickory's name-server pool (not its caching resolver,
//! which keeps the additional addresses of only one SRV target and would hide TTLs behind
//! its cache), each bounded by `timeout` and retried `attempts` times when the server did not
//! answer or failed (never when it answered NXDOMAIN or no records).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, NameServerConfigGroup, Protocol, ResolverOpts};
use hickory_resolver::error::{ResolveError, ResolveErrorKind};
use hickory_resolver::name_server::{NameServerPool, TokioConnectionProvider};
use hickory_resolver::proto::error::ProtoErrorKind;
use hickory_resolver::proto::op::{Message, Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use hickory_resolver::proto::xfer::{DnsHandle, DnsRequestOptions, FirstAnswer};

use super::answer::{usable_address, Answer, DnsError, Record};
use super::name::DnsName;

/// Where to ask and how patiently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `IP:PORT` of the servers to ask (UDP, and TCP for truncated answers); empty: the
    /// `nameserver`s of `/etc/resolv.conf`.
    pub resolvers: Vec<SocketAddr>,
    /// How long one attempt waits for an answer.
    pub timeout: Duration,
    /// Attempts per query (at least 1). A lookup asks for the name and then, in parallel, for
    /// the SRV targets the answer gave no address for: it takes at most about
    /// `2 × attempts × timeout`.
    pub attempts: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            resolvers: Vec::new(),
            timeout: Duration::from_secs(2),
            attempts: 2,
        }
    }
}

/// A TTL for what needs no lookup (an IP literal): the caller's upper bound applies.
const LITERAL_TTL: Duration = Duration::from_secs(86_400);

/// How many SRV targets are looked up at once.
const PARALLEL_TARGETS: usize = 64;

/// Asks the configured servers. Cheap to clone (the pool is shared); keep one per source so
/// its servers' statistics carry over between lookups.
#[derive(Clone)]
pub struct Resolver {
    pool: NameServerPool<TokioConnectionProvider>,
    /// The same servers, asked over TCP (RFC 7766) for an answer that came truncated over
    /// UDP: hickory's pool hands a truncated UDP answer back as it is (and its own TCP
    /// connections stalled on large answers here), and a partial SRV set taken as whole would
    /// drain every node it left out.
    tcp_servers: Vec<SocketAddr>,
    options: Options,
}

/// What one query got back, when the server answered definitely.
enum Reply {
    Records(Message),
    NxDomain,
    NoData,
}

/// Why a host has no address, when that is a definite answer.
enum Missing {
    NxDomain,
    NoAddress,
}

/// A host's addresses with their TTLs (seconds).
type Addresses = Vec<(IpAddr, u32)>;

impl Resolver {
    /// Servers from `options.resolvers`, or else from `/etc/resolv.conf` (read now: a small
    /// local file, but call this off the event loop when that matters).
    pub fn new(options: Options) -> Result<Resolver, DnsError> {
        let servers = match options.resolvers.is_empty() {
            true => {
                let (config, _) =
                    hickory_resolver::system_conf::read_system_conf().map_err(|e| {
                        DnsError::Failed {
                            name: "/etc/resolv.conf".into(),
                            message: format!("cannot be used: {e}"),
                        }
                    })?;
                let mut group = NameServerConfigGroup::new();
                group.extend(config.name_servers().iter().cloned());
                group
            }
            false => {
                let mut group = NameServerConfigGroup::new();
                for address in &options.resolvers {
                    for protocol in [Protocol::Udp, Protocol::Tcp] {
                        group.push(NameServerConfig::new(*address, protocol));
                    }
                }
                group
            }
        };
        if servers.is_empty() {
            return Err(DnsError::Failed {
                name: "/etc/resolv.conf".into(),
                message: "lists no nameserver".into(),
            });
        }
        let mut opts = ResolverOpts::default();
        opts.timeout = options.timeout;
        opts.attempts = options.attempts.max(1) as usize;
        opts.edns0 = true;
        let mut tcp_servers: Vec<SocketAddr> = servers.iter().map(|s| s.socket_addr).collect();
        tcp_servers.dedup();
        let pool = NameServerPool::from_config(servers, opts, TokioConnectionProvider::default());
        Ok(Resolver {
            pool,
            tcp_servers,
            options,
        })
    }

    /// Looks `name` up once (see the module doc for what is dropped and what fails).
    pub async fn resolve(&self, name: &DnsName) -> Result<Answer, DnsError> {
        match name {
            DnsName::Srv(srv) => self.resolve_srv(srv).await,
            DnsName::Host { host, port } => match name.literal() {
                Some(ip) => literal(host, ip, *port),
                None => self.resolve_host(host, *port).await,
            },
        }
    }

    async fn resolve_host(&self, host: &str, port: u16) -> Result<Answer, DnsError> {
        let qname = absolute(host)?;
        let found = match self.addresses(&qname, host).await? {
            Ok(found) => found,
            Err(Missing::NxDomain) => return Err(DnsError::NxDomain { name: host.into() }),
            Err(Missing::NoAddress) => {
                return Err(DnsError::NoRecords {
                    name: host.into(),
                    rtype: "A or AAAA",
                })
            }
        };
        let mut answer = Answer {
            ttl: LITERAL_TTL,
            ..Answer::default()
        };
        let mut record = Record {
            target: host.into(),
            port,
            priority: 0,
            weight: 0,
            addresses: Vec::new(),
        };
        let mut seen = HashSet::new();
        add_addresses(&mut answer, &mut record, &found, &mut seen);
        finish(answer, record, host)
    }

    async fn resolve_srv(&self, name: &str) -> Result<Answer, DnsError> {
        let qname = absolute(name)?;
        let message = match self.query(&qname, RecordType::SRV, name).await? {
            Reply::Records(message) => message,
            Reply::NxDomain => return Err(DnsError::NxDomain { name: name.into() }),
            Reply::NoData => return Err(no_srv(name)),
        };
        let mut srvs: Vec<_> = (message.answers().iter())
            .filter_map(|r| match r.data() {
                Some(RData::SRV(srv)) => Some((srv.clone(), r.ttl())),
                _ => None,
            })
            .collect();
        if srvs.is_empty() {
            return Err(no_srv(name));
        }
        // Lowest priority first, so that of two records giving one address the primary keeps it.
        srvs.sort_by_key(|(srv, _)| srv.priority());
        let mut answer = Answer {
            ttl: LITERAL_TTL,
            ..Answer::default()
        };
        let (mut known, mut wanted) = (additional_addresses(&message), Vec::new());
        let mut refusing = 0;
        for (srv, ttl) in &srvs {
            answer.ttl = answer.ttl.min(Duration::from_secs(u64::from(*ttl)));
            let target = srv.target();
            if target.is_root() {
                refusing += 1;
                let why = "target `.` (no service there)";
                answer.skipped.push(format!("{name}: {why}"));
            } else if srv.port() == 0 {
                (answer.skipped).push(format!("{name}: {}:0: port 0", shown(target)));
            } else if !known.contains_key(target) && !wanted.contains(target) {
                wanted.push(target.clone());
            }
        }
        known.extend(self.addresses_of_all(wanted, name).await?);
        let mut seen = HashSet::new();
        for (srv, _) in &srvs {
            let target = srv.target();
            let Some(found) = known.get(target).filter(|_| srv.port() != 0) else {
                continue;
            };
            let mut record = Record {
                target: shown(target),
                port: srv.port(),
                priority: srv.priority(),
                weight: srv.weight(),
                addresses: Vec::new(),
            };
            match found {
                Ok(found) => add_addresses(&mut answer, &mut record, found, &mut seen),
                Err(missing) => {
                    let why = match missing {
                        Missing::NxDomain => "no such name (NXDOMAIN)",
                        Missing::NoAddress => "no A or AAAA record",
                    };
                    let at = format!("{}:{}", record.target, record.port);
                    answer.skipped.push(format!("{name}: {at}: {why}"));
                }
            }
            if !record.addresses.is_empty() {
                answer.records.push(record);
            }
        }
        if answer.records.is_empty() && refusing < srvs.len() {
            return Err(DnsError::NoUsableRecord {
                name: name.into(),
                reasons: answer.skipped.join("; "),
            });
        }
        Ok(answer)
    }

    /// The addresses of many targets, a few at a time; a target whose lookup failed (not
    /// answered: timeout, SERVFAIL) fails them all.
    async fn addresses_of_all(
        &self,
        targets: Vec<Name>,
        srv: &str,
    ) -> Result<HashMap<Name, Result<Addresses, Missing>>, DnsError> {
        let mut found = HashMap::new();
        let mut tasks = tokio::task::JoinSet::new();
        let mut targets = targets.into_iter();
        loop {
            while tasks.len() < PARALLEL_TARGETS {
                let Some(target) = targets.next() else { break };
                let resolver = self.clone();
                let label = format!("{srv} (target {})", shown(&target));
                tasks.spawn(async move {
                    let result = resolver.addresses(&target, &label).await;
                    (target, result)
                });
            }
            let Some(done) = tasks.join_next().await else {
                return Ok(found);
            };
            let (target, result) = done.map_err(|e| DnsError::Failed {
                name: srv.into(),
                message: format!("a target lookup failed: {e}"),
            })?;
            found.insert(target, result?);
        }
    }

    /// A and AAAA of one host, asked at once. `Err` when either failed without a definite
    /// answer: half an answer could drop the nodes of the other family.
    async fn addresses(
        &self,
        host: &Name,
        label: &str,
    ) -> Result<Result<Addresses, Missing>, DnsError> {
        let (v4, v6) = tokio::join!(
            self.query(host, RecordType::A, label),
            self.query(host, RecordType::AAAA, label)
        );
        let (v4, v6) = (v4?, v6?);
        if matches!((&v4, &v6), (Reply::NxDomain, Reply::NxDomain)) {
            return Ok(Err(Missing::NxDomain));
        }
        let mut found = Vec::new();
        for reply in [v4, v6] {
            if let Reply::Records(message) = reply {
                found.extend(message.answers().iter().filter_map(|r| match r.data() {
                    Some(RData::A(a)) => Some((IpAddr::V4(a.0), r.ttl())),
                    Some(RData::AAAA(aaaa)) => Some((IpAddr::V6(aaaa.0), r.ttl())),
                    _ => None,
                }));
            }
        }
        Ok(match found.is_empty() {
            true => Err(Missing::NoAddress),
            false => Ok(found),
        })
    }

    /// One query, retried while the server does not answer or fails. `label` names it in
    /// errors.
    /// Asks over UDP (the pool), and again over TCP when the answer came truncated; a
    /// truncated answer is never taken as the whole set.
    async fn query(&self, name: &Name, rtype: RecordType, label: &str) -> Result<Reply, DnsError> {
        match self.query_on(name, rtype, label).await? {
            Reply::Records(m) if m.truncated() => self.query_tcp(name, rtype, label).await,
            reply => Ok(reply),
        }
    }

    /// One query over TCP, each server in turn until one answers in time.
    async fn query_tcp(
        &self,
        name: &Name,
        rtype: RecordType,
        label: &str,
    ) -> Result<Reply, DnsError> {
        let mut message = Message::new();
        message.set_id(query_id());
        message.set_recursion_desired(true);
        message.add_query(Query::query(name.clone(), rtype));
        let question = message.to_vec().map_err(|e| DnsError::Failed {
            name: label.into(),
            message: format!("cannot encode the query: {e}"),
        })?;
        let mut last = timeout();
        for server in &self.tcp_servers {
            let asked =
                tokio::time::timeout(self.options.timeout, exchange_tcp(*server, &question));
            match asked.await {
                Ok(Ok(answer)) if answer.id() == message.id() => {
                    return match answer.truncated() {
                        true => Err(DnsError::Failed {
                            name: label.into(),
                            message: "the answer came truncated even over TCP; a part of a \
                                      list is not taken as the list"
                                .into(),
                        }),
                        false => classify_message(answer, label),
                    };
                }
                Ok(Ok(_)) => {
                    last = DnsError::Failed {
                        name: label.into(),
                        message: format!("{server} answered another query over TCP"),
                    }
                }
                Ok(Err(e)) => {
                    last = DnsError::Failed {
                        name: label.into(),
                        message: format!("over TCP to {server}: {e}"),
                    }
                }
                Err(_) => last = timeout(),
            }
        }
        match last {
            DnsError::Timeout { .. } => Err(DnsError::Timeout {
                name: label.into(),
                attempts: 1,
                timeout: self.options.timeout,
            }),
            other => Err(other),
        }
    }

    async fn query_on(
        &self,
        name: &Name,
        rtype: RecordType,
        label: &str,
    ) -> Result<Reply, DnsError> {
        let attempts = self.options.attempts.max(1);
        let mut options = DnsRequestOptions::default();
        options.use_edns = true;
        let mut last = None;
        for _ in 0..attempts {
            let sent = (self.pool)
                .lookup(Query::query(name.clone(), rtype), options)
                .first_answer();
            // The pool has its own timeout; this bounds a pool that tries server after server.
            let bound = self.options.timeout + Duration::from_millis(100);
            let result = match tokio::time::timeout(bound, sent).await {
                Ok(result) => classify(result, label),
                Err(_) => Err(timeout()),
            };
            match result {
                Err(e) if e.transient() => last = Some(e),
                other => return other,
            }
        }
        Err(match last {
            Some(DnsError::Timeout { .. }) | None => DnsError::Timeout {
                name: label.into(),
                attempts,
                timeout: self.options.timeout,
            },
            Some(other) => other,
        })
    }
}

/// Sorts a server's reply into a definite answer or an error.
fn classify(
    result: Result<hickory_resolver::proto::xfer::DnsResponse, ResolveError>,
    label: &str,
) -> Result<Reply, DnsError> {
    let error = match result {
        Ok(response) => return Ok(Reply::Records(response.into_message())),
        Err(error) => error,
    };
    match error.kind() {
        ResolveErrorKind::NoRecordsFound { response_code, .. } => match *response_code {
            ResponseCode::NXDomain => Ok(Reply::NxDomain),
            ResponseCode::NoError => Ok(Reply::NoData),
            code => Err(DnsError::Rcode {
                name: label.into(),
                rcode: rcode_name(code),
            }),
        },
        ResolveErrorKind::Timeout => Err(timeout()),
        ResolveErrorKind::Proto(p) if matches!(p.kind(), ProtoErrorKind::Timeout) => Err(timeout()),
        _ => Err(DnsError::Failed {
            name: label.into(),
            message: error.to_string(),
        }),
    }
}

/// One DNS message over TCP: two bytes of length, then the message, each way (RFC 1035 §4.2.2).
async fn exchange_tcp(server: SocketAddr, question: &[u8]) -> std::io::Result<Message> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server).await?;
    let length = u16::try_from(question.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(question.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(question);
    stream.write_all(&framed).await?;
    let length = stream.read_u16().await?;
    let mut answer = vec![0; usize::from(length)];
    stream.read_exact(&mut answer).await?;
    Message::from_vec(&answer).map_err(std::io::Error::other)
}

/// An id for a query of our own (a TCP one: the connection is ours alone, so it need not be
/// unpredictable).
fn query_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Sorts a message a server sent into a definite answer or an error, as [`classify`] does
/// for the pool's.
fn classify_message(message: Message, label: &str) -> Result<Reply, DnsError> {
    match message.response_code() {
        ResponseCode::NoError if message.answers().is_empty() => Ok(Reply::NoData),
        ResponseCode::NoError => Ok(Reply::Records(message)),
        ResponseCode::NXDomain => Ok(Reply::NxDomain),
        code => Err(DnsError::Rcode {
            name: label.into(),
            rcode: rcode_name(code),
        }),
    }
}

/// A timeout whose details `Resolver::query` fills in.
fn timeout() -> DnsError {
    DnsError::Timeout {
        name: String::new(),
        attempts: 0,
        timeout: Duration::ZERO,
    }
}

/// The mnemonic operators know from dig (`SERVFAIL`), or the number.
fn rcode_name(code: ResponseCode) -> String {
    match code {
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        ResponseCode::Refused => "REFUSED".into(),
        ResponseCode::NotAuth => "NOTAUTH".into(),
        other => format!("response code {}", u16::from(other)),
    }
}

fn no_srv(name: &str) -> DnsError {
    DnsError::NoRecords {
        name: name.into(),
        rtype: "SRV",
    }
}

/// The A and AAAA records the server put beside the SRV records, by owner.
fn additional_addresses(message: &Message) -> HashMap<Name, Result<Addresses, Missing>> {
    let mut found: HashMap<Name, Result<Addresses, Missing>> = HashMap::new();
    for record in message.additionals().iter().chain(message.answers()) {
        let ip = match record.data() {
            Some(RData::A(a)) => IpAddr::V4(a.0),
            Some(RData::AAAA(aaaa)) => IpAddr::V6(aaaa.0),
            _ => continue,
        };
        let entry = found.entry(record.name().clone()).or_insert(Ok(Vec::new()));
        if let Ok(list) = entry {
            list.push((ip, record.ttl()));
        }
    }
    found
}

/// Adds a host's usable addresses not given already, noting the others in `skipped`.
fn add_addresses(
    answer: &mut Answer,
    record: &mut Record,
    found: &Addresses,
    seen: &mut HashSet<SocketAddr>,
) {
    for (ip, ttl) in found {
        let at = SocketAddr::new(*ip, record.port);
        let why = match usable_address(*ip) {
            Err(why) => why,
            Ok(()) if !seen.insert(at) => "given by another record already",
            Ok(()) => {
                answer.ttl = answer.ttl.min(Duration::from_secs(u64::from(*ttl)));
                if !record.addresses.contains(ip) {
                    record.addresses.push(*ip);
                }
                continue;
            }
        };
        (answer.skipped).push(format!("{}: {at}: {why}", record.target));
    }
}

/// The answer for one host record, refused when none of its addresses is usable.
fn finish(mut answer: Answer, record: Record, name: &str) -> Result<Answer, DnsError> {
    if record.addresses.is_empty() {
        return Err(DnsError::NoUsableRecord {
            name: name.into(),
            reasons: answer.skipped.join("; "),
        });
    }
    answer.records.push(record);
    Ok(answer)
}

fn literal(host: &str, ip: IpAddr, port: u16) -> Result<Answer, DnsError> {
    let mut answer = Answer {
        ttl: LITERAL_TTL,
        ..Answer::default()
    };
    let mut record = Record {
        target: host.into(),
        port,
        priority: 0,
        weight: 0,
        addresses: Vec::new(),
    };
    add_addresses(
        &mut answer,
        &mut record,
        &vec![(ip, u32::MAX)],
        &mut HashSet::new(),
    );
    finish(answer, record, host)
}

/// `name` as an absolute DNS name (the search list is not applied).
fn absolute(name: &str) -> Result<Name, DnsError> {
    Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).map_err(|e| DnsError::Failed {
        name: name.into(),
        message: format!("not a DNS name: {e}"),
    })
}

/// A name as written in messages: without its trailing dot.
fn shown(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::proto::rr::rdata::{A, AAAA};
    use hickory_resolver::proto::rr::Record as DnsRecord;

    /// Servers that put the targets' addresses beside the SRV records (CoreDNS, Consul) save
    /// a lookup per target; dnsmasq, in the tests, does not.
    #[test]
    fn addresses_in_the_additional_section_are_taken_by_owner() {
        let name = |n: &str| Name::from_ascii(n).unwrap();
        let mut message = Message::new();
        message.add_additional(DnsRecord::from_rdata(
            name("a.web.test."),
            5,
            RData::A(A::new(10, 0, 0, 1)),
        ));
        message.add_additional(DnsRecord::from_rdata(
            name("A.Web.Test."),
            9,
            RData::AAAA(AAAA::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        ));
        let found = additional_addresses(&message);
        let Some(Ok(a)) = found.get(&name("a.web.test.")) else {
            panic!("a.web.test missing");
        };
        let seen: Vec<String> = a.iter().map(|(ip, ttl)| format!("{ip}/{ttl}")).collect();
        assert_eq!(seen, ["10.0.0.1/5", "fd00::1/9"]);
        assert!(!found.contains_key(&name("b.web.test.")));
    }
}
