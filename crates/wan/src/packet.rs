//! Just enough IPv4 header reading to route a packet to its path and keep its flow together.

use std::net::Ipv4Addr;

/// The fields of an IPv4 packet the router needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// A key shared by the packets of one transport flow (addresses, protocol, ports).
    pub flow: u64,
}

/// Reads an IPv4 header; None for anything else (IPv6, truncated packets).
pub fn parse(packet: &[u8]) -> Option<Header> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let header_len = usize::from(packet[0] & 0x0f) * 4;
    if header_len < 20 || packet.len() < header_len {
        return None;
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    let protocol = packet[9];
    let fragment_offset = u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff;
    // Ports are read only from first fragments of TCP and UDP; other packets of a pair of
    // hosts share one flow, which only makes ordering stricter.
    let ports = match protocol {
        6 | 17 if fragment_offset == 0 && packet.len() >= header_len + 4 => {
            u32::from_be_bytes(packet[header_len..header_len + 4].try_into().ok()?)
        }
        _ => 0,
    };
    let flow = mix(u64::from(u32::from(src)) << 32 | u64::from(u32::from(dst)))
        ^ mix(u64::from(ports) << 8 | u64::from(protocol));
    Some(Header { src, dst, flow })
}

/// A 64-bit finaliser (splitmix64) so nearby addresses give unrelated keys.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn reads_addresses_and_separates_flows_by_port() {
        let a = parse(&udp([198, 18, 0, 2], [198, 18, 0, 1], 1000, 53)).unwrap();
        assert_eq!(a.src, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(a.dst, Ipv4Addr::new(198, 18, 0, 1));
        let same = parse(&udp([198, 18, 0, 2], [198, 18, 0, 1], 1000, 53)).unwrap();
        let other = parse(&udp([198, 18, 0, 2], [198, 18, 0, 1], 1001, 53)).unwrap();
        assert_eq!(a.flow, same.flow);
        assert_ne!(a.flow, other.flow);
    }

    #[test]
    fn refuses_non_ipv4_and_truncated_packets() {
        assert_eq!(parse(&[0x60; 40]), None);
        assert_eq!(parse(&[0x45; 10]), None);
        let mut bad_ihl = udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2);
        bad_ihl[0] = 0x4f;
        assert_eq!(parse(&bad_ihl), None);
    }
}
