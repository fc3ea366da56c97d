//! The PROXY protocol from a front L4 balancer (`accept_on` listeners; HAProxy's
//! `proxy-protocol.txt`, versions 1 and 2): the balancer's header is read before any HTTP, and
//! its source address becomes the client's (`X-Forwarded-For`, the access log, the header sent
//! on to nodes). Only sources in `trusted` may send one: any other peer of such a listener is
//! closed at once, as is a connection whose header is missing or malformed; both are counted
//! (`capstan_proxy_protocol_rejected_total`). Sending the header to nodes is
//! [`crate::upstream::proxy_protocol`]'s job.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::config::sections::proxy_protocol::ProxyProtocolConfig;
use crate::state::counters::Rejections;
use crate::upstream::proxy_protocol::V2_SIGNATURE;

/// The addresses a header carried: `None` for `UNKNOWN` (v1) or `LOCAL` / an unspecified
/// family (v2), where the connection's own addresses stand.
pub(crate) type Carried = Option<(SocketAddr, SocketAddr)>;

/// Longest v1 line, CRLF included (the specification's bound).
const V1_MAX: usize = 107;
/// Longest v2 address block taken (addresses and TLVs); the specification's fixed part is 216
/// bytes at most, and TLVs a balancer adds stay well within this.
const V2_MAX_BLOCK: usize = 2048;

/// Reads one PROXY header (v1 or v2) from the start of `stream`, exactly: not one byte of
/// what follows is consumed. Beside the addresses: whether a v2 header says the client's own
/// connection was TLS ([`says_tls`]).
pub(crate) async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(Carried, bool), String> {
    // The shortest header of either version ("PROXY UNKNOWN\r\n") is 15 bytes: reading that
    // much cannot wait for bytes a client would only send after an answer.
    let mut head = [0u8; 15];
    stream
        .read_exact(&mut head)
        .await
        .map_err(|e| format!("no PROXY header: {e}"))?;
    if head[..12] == V2_SIGNATURE {
        let mut rest = [0u8; 1];
        stream
            .read_exact(&mut rest)
            .await
            .map_err(|e| format!("PROXY v2 header cut short: {e}"))?;
        let len = usize::from(u16::from_be_bytes([head[14], rest[0]]));
        if len > V2_MAX_BLOCK {
            return Err(format!("PROXY v2 address block of {len} bytes is too long"));
        }
        let mut block = vec![0u8; len];
        stream
            .read_exact(&mut block)
            .await
            .map_err(|e| format!("PROXY v2 header cut short: {e}"))?;
        let carried = parse_v2(head[12], head[13], &block)?;
        return Ok((carried, says_tls(head[13], &block)));
    }
    if !head.starts_with(b"PROXY ") {
        return Err("the connection does not start with a PROXY header".into());
    }
    let mut line = head.to_vec();
    while !line.ends_with(b"\r\n") {
        if line.len() >= V1_MAX {
            return Err("PROXY v1 line longer than 107 bytes".into());
        }
        let mut byte = [0u8; 1];
        stream
            .read_exact(&mut byte)
            .await
            .map_err(|e| format!("PROXY v1 line cut short: {e}"))?;
        line.push(byte[0]);
    }
    Ok((parse_v1(&line)?, false))
}

/// The type of the v2 TLV that describes the client's TLS (`PP2_TYPE_SSL`), and its flag for
/// a client that connected over TLS (`PP2_CLIENT_SSL`).
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_CLIENT_SSL: u8 = 0x01;

/// Whether a v2 header's TLVs (after the addresses of `family`) say the client connected over
/// TLS: a `PP2_TYPE_SSL` TLV with `PP2_CLIENT_SSL` set. TLVs cut short are not read.
pub(crate) fn says_tls(family: u8, block: &[u8]) -> bool {
    let addresses = match family {
        0x11 | 0x12 => 12,
        0x21 | 0x22 => 36,
        0x31 | 0x32 => 216,
        _ => return false,
    };
    let mut tlvs = block.get(addresses..).unwrap_or_default();
    while let [kind, high, low, rest @ ..] = tlvs {
        let len = usize::from(u16::from_be_bytes([*high, *low]));
        let Some(value) = rest.get(..len) else {
            return false;
        };
        if *kind == PP2_TYPE_SSL {
            return value
                .first()
                .is_some_and(|client| client & PP2_CLIENT_SSL != 0);
        }
        tlvs = &rest[len..];
    }
    false
}

/// A whole v1 line, CRLF included.
pub(crate) fn parse_v1(line: &[u8]) -> Result<Carried, String> {
    let text = std::str::from_utf8(line)
        .ok()
        .and_then(|t| t.strip_suffix("\r\n"))
        .ok_or("PROXY v1 line is not ASCII ending in CRLF")?;
    let fields: Vec<&str> = text.split(' ').collect();
    match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Ok(None),
        ["PROXY", family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let v4 = *family == "TCP4";
            let ip = |s: &str| -> Result<IpAddr, String> {
                let ip: IpAddr = if v4 {
                    s.parse::<Ipv4Addr>().map(IpAddr::V4)
                } else {
                    s.parse::<Ipv6Addr>().map(IpAddr::V6)
                }
                .map_err(|_| format!("PROXY v1: `{s}` is not a {family} address"))?;
                Ok(ip)
            };
            let port = |s: &str| -> Result<u16, String> {
                // The specification forbids leading zeroes, signs and spaces.
                if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
                    return Err(format!("PROXY v1: `{s}` is not a port"));
                }
                s.parse()
                    .map_err(|_| format!("PROXY v1: `{s}` is not a port"))
            };
            Ok(Some((
                SocketAddr::new(ip(src)?, port(sport)?),
                SocketAddr::new(ip(dst)?, port(dport)?),
            )))
        }
        _ => Err(format!("malformed PROXY v1 line `{text}`")),
    }
}

/// A v2 header's version/command byte, family/protocol byte and address block.
pub(crate) fn parse_v2(version_command: u8, family: u8, block: &[u8]) -> Result<Carried, String> {
    if version_command >> 4 != 2 {
        return Err(format!(
            "PROXY v2: version {} is not 2",
            version_command >> 4
        ));
    }
    match version_command & 0x0f {
        0 => return Ok(None), // LOCAL: the balancer's own connection (a health check)
        1 => {}
        other => return Err(format!("PROXY v2: unknown command {other}")),
    }
    let take = |n: usize| {
        block
            .get(..n)
            .ok_or_else(|| format!("PROXY v2: address block of {} bytes is short", block.len()))
    };
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    match family {
        // TCP (or UDP) over IPv4.
        0x11 | 0x12 => {
            let b = take(12)?;
            let ip = |o: &[u8]| IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3]));
            Ok(Some((
                SocketAddr::new(ip(&b[0..4]), port(&b[8..10])),
                SocketAddr::new(ip(&b[4..8]), port(&b[10..12])),
            )))
        }
        // TCP (or UDP) over IPv6.
        0x21 | 0x22 => {
            let b = take(36)?;
            let ip = |o: &[u8]| {
                let octets: [u8; 16] = o.try_into().expect("16 bytes");
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            Ok(Some((
                SocketAddr::new(ip(&b[0..16]), port(&b[32..34])),
                SocketAddr::new(ip(&b[16..32]), port(&b[34..36])),
            )))
        }
        // UNSPEC, or unix sockets: the specification has the receiver use the real addresses.
        _ => Ok(None),
    }
}

/// On a PROXY listener: the client's addresses after the balancer's header, and whether the
/// header says the client came over TLS; or why the connection must be closed (already
/// counted).
pub(crate) async fn accept<S: AsyncRead + Unpin>(
    stream: &mut S,
    peer: SocketAddr,
    local: SocketAddr,
    config: &ProxyProtocolConfig,
    header_read: Duration,
    rejections: &Rejections,
) -> Result<(SocketAddr, SocketAddr, bool), String> {
    if !config.trusts(peer.ip()) {
        rejections.untrusted.fetch_add(1, Ordering::Relaxed);
        return Err(format!(
            "{peer} is not in proxy_protocol.trusted; connection closed"
        ));
    }
    let read = tokio::time::timeout(header_read, read_header(stream)).await;
    match read {
        Ok(Ok((Some((client, local)), tls))) => Ok((client, local, tls)),
        Ok(Ok((None, tls))) => Ok((peer, local, tls)),
        Ok(Err(why)) => {
            rejections.malformed.fetch_add(1, Ordering::Relaxed);
            Err(format!("{peer}: {why}; connection closed"))
        }
        Err(_) => {
            rejections.malformed.fetch_add(1, Ordering::Relaxed);
            Err(format!(
                "{peer}: no PROXY header within the header-read timeout; connection closed"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The headers are made by the sending side.
    use crate::upstream::proxy_protocol::{encode_v1, encode_v2, encode_v2_local};

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "192.0.2.7:51234".parse().unwrap(),
            "198.51.100.1:80".parse().unwrap(),
        )
    }

    #[test]
    fn v1_round_trips() {
        let (src, dst) = addrs();
        let line = encode_v1(src, dst);
        assert_eq!(line, b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 80\r\n");
        assert_eq!(parse_v1(&line).unwrap(), Some((src, dst)));
        let v6 = encode_v1("[2001:db8::1]:1".parse().unwrap(), dst);
        assert!(v6.starts_with(b"PROXY TCP6 2001:db8::1 ::ffff:198.51.100.1 1 80"));
        assert_eq!(parse_v1(b"PROXY UNKNOWN\r\n").unwrap(), None);
    }

    #[test]
    fn v1_refuses_what_the_specification_forbids() {
        for bad in [
            &b"PROXY TCP4 192.0.2.7 198.51.100.1 051234 80\r\n"[..],
            b"PROXY TCP4 2001:db8::1 198.51.100.1 1 80\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1\r\n",
            b"PROXY TCP5 a b 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 198.51.100.1 1 80\n",
        ] {
            assert!(parse_v1(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[tokio::test]
    async fn v2_round_trips_and_reads_exactly_the_header() {
        let (src, dst) = addrs();
        let mut wire = encode_v2(src, dst);
        assert_eq!(wire.len(), 16 + 12);
        wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let mut reader = &wire[..];
        assert_eq!(
            read_header(&mut reader).await.unwrap(),
            (Some((src, dst)), false)
        );
        assert_eq!(reader, b"GET / HTTP/1.1\r\n");
        let local = encode_v2_local();
        assert_eq!(read_header(&mut &local[..]).await.unwrap(), (None, false));
        let v6 = encode_v2("[2001:db8::1]:9".parse().unwrap(), dst);
        let mut reader = &v6[..];
        let (s, d) = read_header(&mut reader).await.unwrap().0.unwrap();
        assert_eq!((s.to_string(), d.port()), ("[2001:db8::1]:9".into(), 80));
    }

    #[tokio::test]
    async fn a_v2_header_may_say_the_client_came_over_tls() {
        let (src, dst) = addrs();
        let plain = encode_v2(src, dst);
        // The length field grows by the TLVs: an unrelated one (ALPN), then PP2_TYPE_SSL.
        let with_tlvs = |client: u8| {
            let mut wire = plain.clone();
            let tlvs = [
                &[0x01, 0, 2, b'h', b'2'][..],
                &[0x20, 0, 5, client, 0, 0, 0, 0],
            ];
            let added: usize = tlvs.iter().map(|t| t.len()).sum();
            let len = u16::from_be_bytes([wire[14], wire[15]]) + added as u16;
            wire[14..16].copy_from_slice(&len.to_be_bytes());
            tlvs.iter().for_each(|t| wire.extend_from_slice(t));
            wire
        };
        let tls = with_tlvs(0x01);
        assert_eq!(
            read_header(&mut &tls[..]).await.unwrap(),
            (Some((src, dst)), true)
        );
        let not_tls = with_tlvs(0x00);
        assert_eq!(
            read_header(&mut &not_tls[..]).await.unwrap(),
            (Some((src, dst)), false)
        );
        assert!(!read_header(&mut &plain[..]).await.unwrap().1);
        assert!(
            !says_tls(0x11, &[0; 12 + 3 + 1]),
            "a TLV cut short says nothing"
        );
    }

    #[tokio::test]
    async fn malformed_headers_are_errors() {
        let mut not_proxy = &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..];
        assert!(read_header(&mut not_proxy).await.is_err());
        let mut long = b"PROXY TCP4 ".to_vec();
        long.extend_from_slice(&[b'1'; 200]);
        assert!(read_header(&mut &long[..]).await.is_err());
        let mut v3 = V2_SIGNATURE.to_vec();
        v3.extend_from_slice(&[0x31, 0x11, 0, 0]);
        assert!(read_header(&mut &v3[..]).await.is_err());
    }
}
