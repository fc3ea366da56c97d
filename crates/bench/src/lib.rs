//! `capstan bench`: a load generator that can push a server past its capacity and measures
//! honestly.
//!
//! `--polygraph`: Web Polygraph workloads through a proxy, with hit ratios per phase
//! ([`polygraph`]).
//!
//! `--http2` and `--http3`: the same engines over HTTP/2 (TLS) and HTTP/3 (QUIC), several
//! requests at once per connection ([`mux`]).
//!
//! Engines: `open` (Banga & Druschel's S-Client: requests start on a schedule whatever the server
//! does; non-blocking connects abandoned after a timeout and retried), `closed` (WebStone-style
//! clients), `sessions` (the CAP paper's Table 1 sessions) and `replay` (access logs). Latency is
//! recorded from the intended start (corrected) and the actual start (uncorrected) in
//! HdrHistograms; results serialise to JSON (`SCHEMA.md`) and merge exactly across shards.
//!
//! ```no_run
//! # async fn f() -> Result<(), capstan_bench::BenchError> {
//! use capstan_bench::{BenchConfig, Target};
//! let mut cfg = BenchConfig::open(Target::parse("http://127.0.0.1:8080/")?, 1000.0);
//! cfg.duration = std::time::Duration::from_secs(5);
//! let result = capstan_bench::run(cfg, None).await?;
//! println!("{} req/s, p99 {} ms", result.completed_rps, result.latency_ms.corrected.p99);
//! # Ok(()) }
//! ```

pub mod config;
mod engine;
mod error;
pub mod http;
mod mux;
pub mod polygraph;
pub mod report;
pub mod result;
mod runner;
pub mod source;
mod stats;
mod timer;
mod tls;

pub use config::{
    parse_burst, parse_duration, parse_phases, BenchConfig, Engine, Protocol, ReplaySpeed, Source,
    Target,
};
pub use error::BenchError;
pub use result::{merge, Percentiles, RunResult, TargetResult, TimelineSecond, WanPath, WanResult};
pub use runner::{preview, run, Progress, ProgressFn};
