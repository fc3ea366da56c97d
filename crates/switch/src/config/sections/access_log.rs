//! The `[access_log]` section: where the log goes, its format, sampling and buffer.

use serde::{Deserialize, Serialize};

/// The `[access_log]` section.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessLogConfig {
    /// A file (appended to, created if missing), or `"-"` for standard output.
    pub path: String,
    pub format: LogFormat,
    /// Log one request in `sample` (1: every request).
    pub sample: u64,
    /// Lines waiting for the writer at most (a thread hands its buffer over at 64 KiB or this
    /// many lines); past it a buffer's lines are dropped and counted.
    pub buffer: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            path: "-".into(),
            format: LogFormat::Combined,
            sample: 1,
            buffer: 16_384,
        }
    }
}

impl AccessLogConfig {
    /// What the parser cannot check: the key at fault and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.path.trim().is_empty() {
            return Err(("path", "access_log.path must be a file or \"-\"".into()));
        }
        if self.sample == 0 {
            return Err(("sample", "access_log.sample must be at least 1".into()));
        }
        if self.buffer == 0 {
            return Err(("buffer", "access_log.buffer must be at least 1".into()));
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let format = match self.format {
            LogFormat::Common => "common",
            LogFormat::Combined => "combined",
            LogFormat::Json => "json",
        };
        let to = if self.path == "-" {
            "stdout"
        } else {
            &self.path
        };
        format!(
            "log       {format} access log to {to}, 1 request in {}, buffer {} lines\n",
            self.sample, self.buffer
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `host - - [date] "request" status bytes`.
    Common,
    /// Common plus `"referer" "user-agent"` (Apache's and nginx's default).
    Combined,
    /// One JSON object a line, with timings.
    Json,
}
