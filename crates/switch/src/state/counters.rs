//! Switch-wide counters of the front end and the tunnels, for `/metrics`.

use std::sync::atomic::AtomicU64;

/// Connections refused on PROXY listeners, by cause, for `/metrics`.
#[derive(Default)]
pub struct Rejections {
    pub untrusted: AtomicU64,
    pub malformed: AtomicU64,
}

/// The switch's tunnels, for `/metrics`.
#[derive(Default)]
pub struct TunnelCounts {
    /// Open now.
    pub open: AtomicU64,
    /// Opened since start.
    pub opened: AtomicU64,
}

/// Responses cut by `timeouts.client_send`, for `/metrics`.
#[derive(Debug, Default)]
pub struct ClientSendTimeouts {
    /// Client connections closed because a write to the socket made no progress.
    pub connections: AtomicU64,
    /// HTTP/2 streams cut because the client granted no window to take their next frame.
    pub h2_streams: AtomicU64,
}
