//! TUN devices: layer-3 interfaces whose packets the router reads and writes as plain IP
//! datagrams. A non-persistent TUN device disappears when its last descriptor closes, so even a
//! router killed with SIGKILL leaves no device behind.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// The part of `struct ifreq` TUNSETIFF reads: a name and flags, padded to the kernel's 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device (IPv4 packets without a packet-information header), non-blocking.
#[derive(Debug)]
pub struct Tun {
    pub name: String,
    pub fd: OwnedFd,
}

impl Tun {
    /// Creates the device `name` in the calling thread's network namespace.
    pub fn create(name: &str) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name '{name}'"),
            ));
        }
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/net/tun: {e}")))?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads (and writes back) one `struct ifreq`; `req` has its layout
        // (16-byte name, flags, padding to 40 bytes) and outlives the call; the fd is open.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create TUN device {name}: {e}"),
            ));
        }
        Ok(Tun {
            name: name.to_string(),
            fd: file.into(),
        })
    }
}

/// Reads one packet; Ok(None) when none is waiting.
pub fn read_packet(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// Writes one packet (the kernel takes it whole or refuses it).
pub fn write_packet(fd: &OwnedFd, packet: &[u8]) -> io::Result<()> {
    // SAFETY: `packet` is valid for reads of `packet.len()` bytes for the duration of the call.
    let n = unsafe { libc::write(fd.as_raw_fd(), packet.as_ptr().cast(), packet.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
