//! `capstan origin`: the test back-end node of a Capstan web cluster.
//!
//! It serves a generated document tree (WebStone, Web Polygraph, or the CAP paper's size law),
//! the Jones thesis's CGI services (`/cgi-bin/cpu_light.cgi`, `/cgi-bin/cpu_med.cgi`,
//! `/cgi-bin/disk_load.cgi?file=…`), secure variants of everything under `/secure/…` with the
//! CAP paper's SSL costs, and a load report at `GET /_capstan/load`. For checks against
//! queueing theory, `/cgi-bin/demand.cgi?ms=M&law=exp&queue=fcfs` spends a stated CPU demand
//! (constant or exponential) on the processor-shared CPU or first come first served on a core.
//!
//! With `resources = emulated` every request spends *modelled* time in the node's CPU (processor
//! sharing over `cores`), disk (FCFS), NIC and memory cache, so many nodes on one small machine
//! behave like separate machines. With `resources = real` it burns real CPU with a calibrated loop,
//! does real synchronous disk I/O and serves real files. With a `partition` (node K of N) an
//! emulated node's own disk holds only its share of the tree and it reads the rest over a
//! modelled NFS, `node.remote_penalty` slower (SWEB's data placement).
//!
//! The report is `capstan_core::report::LoadReport`, the one wire format of every node. The
//! [`agent`] module serves that same report for a real server (nginx, Apache) from `/proc`: the
//! `capstan agent` command.
//!
//! ```no_run
//! # async fn f() -> Result<(), capstan_origin::OriginError> {
//! let mut config = capstan_origin::OriginConfig::default();
//! config.listen = "127.0.0.1:0".parse().unwrap();
//! let node = capstan_origin::start(config).await?;
//! println!("serving on {}", node.addr());
//! node.shutdown().await;
//! # Ok(()) }
//! ```

pub mod agent;
mod config;
mod emulated;
mod error;
mod load;
mod processes;
mod procfs;
mod real;
mod server;
mod service;
mod tls;

pub use config::{parse_partition, parse_size, OriginConfig, Resources, Services};
pub use error::OriginError;
// The report is core's one typed wire format; re-exported so users of the origin need not name
// core for it.
pub use capstan_core::report::{
    CacheReport, ClassWindow, LoadReport, Partition, ProcessReport, TimerReport, Window,
};
pub use real::materialize;
pub use server::{run, serve_threads, serve_threads_bound, start, Bound, RunningOrigin};
pub use service::{X_ORIGIN_FILE_CACHE, X_ORIGIN_NODE};
pub use tls::TlsReport;
