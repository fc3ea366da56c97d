//! A lean UDP sender for the router's packets-per-second benchmark (`crates/wan/pps.sh`):
//! iperf3 spends more CPU per packet than the router does, so on a small machine it, not the
//! router, sets the rate. This sends small datagrams as fast as `sendmmsg(2)` takes them, in
//! batches of 64, for a while, and prints how many it sent.
//!
//!   udp_flood ADDR:PORT [IP_PACKET_BYTES=64] [SECONDS=4]

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const BATCH: usize = 64;
/// IPv4 and UDP headers: a 64-byte IP packet carries 36 bytes of payload.
const HEADERS: usize = 28;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: udp_flood ADDR:PORT [IP_PACKET_BYTES=64] [SECONDS=4]";
    let Some(target) = args.get(1).and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let size: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let seconds: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4.0);
    if !(HEADERS + 1..=1500).contains(&size) || !seconds.is_finite() || seconds <= 0.0 {
        eprintln!("{usage}: packet size 29–1500, seconds > 0");
        std::process::exit(2);
    }
    let socket = UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket");
    socket.connect(target).expect("connect the UDP socket");
    let payload = vec![0x5a_u8; size - HEADERS];
    let sent = flood(&socket, &payload, Duration::from_secs_f64(seconds));
    println!(
        "{{\"sent\": {sent}, \"seconds\": {seconds}, \"pps\": {:.0}, \"ip_bytes\": {size}}}",
        sent as f64 / seconds
    );
}

/// Sends `payload` until `length` has passed; returns the datagrams the kernel took.
fn flood(socket: &UdpSocket, payload: &[u8], length: Duration) -> u64 {
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|_| libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain old data; all-zero is a valid value (no name, no control).
    let mut msgs: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let end = Instant::now() + length;
    let mut sent = 0u64;
    while Instant::now() < end {
        // SAFETY: msgs holds BATCH initialised headers whose iovecs point into `payload`,
        // which outlives the call; the socket is connected, so no address is needed.
        let n = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                0,
            )
        };
        if n > 0 {
            sent += n as u64;
        } else {
            // A full device queue (ENOBUFS) or a refused port: back off for a moment.
            std::thread::yield_now();
        }
    }
    sent
}
