//! The `[http2]` section: limits of HTTP/2 connections from clients, and the hyper server
//! builder they make.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[http2]`: limits of HTTP/2 connections from clients (TLS listeners with ALPN `h2`, and
/// plain listeners with `h2c = true`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http2 {
    /// Streams a client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Largest header list a client may send, in bytes as HTTP/2 counts them (name + value
    /// + 32 per field; SETTINGS_MAX_HEADER_LIST_SIZE). A larger one resets its stream.
    pub max_header_list_size: u32,
    /// Flow-control window of each stream for request bodies, in bytes.
    pub stream_window: u32,
    /// Flow-control window of the whole connection, in bytes.
    pub connection_window: u32,
    /// Interval of PINGs to an idle client connection; absent: none (the client idle timeout
    /// still closes it).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub keepalive_interval: Option<Duration>,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            // nginx's and HAProxy's default.
            max_concurrent_streams: 100,
            // As `limits.max_header_bytes`.
            max_header_list_size: 32 * 1024,
            stream_window: 1024 * 1024,
            connection_window: 1024 * 1024,
            keepalive_interval: None,
        }
    }
}

/// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;

impl Http2 {
    /// The key at fault and what is wrong, for a located error.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_concurrent_streams == 0 {
            return Err((
                "max_concurrent_streams",
                "http2.max_concurrent_streams must be at least 1".into(),
            ));
        }
        if self.max_header_list_size < 1024 {
            return Err((
                "max_header_list_size",
                "http2.max_header_list_size must be at least 1024 bytes".into(),
            ));
        }
        for (key, value) in [
            ("stream_window", self.stream_window),
            ("connection_window", self.connection_window),
        ] {
            if !(65_535..=MAX_WINDOW).contains(&value) {
                return Err((
                    key,
                    format!("http2.{key} must be between 65535 and {MAX_WINDOW} bytes"),
                ));
            }
        }
        Ok(())
    }

    /// A hyper HTTP/2 server builder with these settings.
    pub(crate) fn builder(
        &self,
    ) -> hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor> {
        let mut builder =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_size)
            .initial_stream_window_size(self.stream_window)
            .initial_connection_window_size(self.connection_window)
            .keep_alive_interval(self.keepalive_interval);
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        assert!(Http2::default().check().is_ok());
        let zero = Http2 {
            max_concurrent_streams: 0,
            ..Http2::default()
        };
        assert_eq!(zero.check().unwrap_err().0, "max_concurrent_streams");
        let small = Http2 {
            stream_window: 100,
            ..Http2::default()
        };
        assert_eq!(small.check().unwrap_err().0, "stream_window");
    }
}
