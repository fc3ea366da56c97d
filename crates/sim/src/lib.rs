//! `capstan-sim`: a discrete-event simulator of a web cluster (the CAP paper's §4 model) that
//! runs the very same `core` dispatching policies and `model` node resources as the live switch
//! and the emulated origin nodes.
//!
//! - [`event`]: integer-nanosecond virtual time, a heap with sequence-number tie-break.
//! - [`scenario`]: the paper's six workloads, also loadable from TOML.
//! - [`engine`]: one run — sessions, switch (layer 4/7 costs, T_gat-stale state), nodes
//!   (processor-shared CPU, FCFS disk, LRU cache, NIC, SSL), back-end databases.
//! - [`run`]: policies × replications in parallel, summaries with confidence intervals.
//! - [`queueing`]: the same event core on textbook queues, for validation.
//! - [`report`]: the HTML report with SVG plots.
//! - [`sweep`], [`sweep_report`]: node-count and arrival-rate sweeps (CAP Table 1's ranges).
//! - [`results_md`]: renders `BENCHMARKS-papers.md` from a template and the runs' JSON files.
//! - [`sweb`]: `capstan sim sweb-skewed` and `sweb-sizes` — SWEB's experiments (IPPS '96, §4)
//!   on a model of its cluster (local disks, NFS, DNS rotation, redirection, loadd every 2 s).
//! - [`tier`]: `capstan sim tier` — K dispatchers (switches) in front of the same nodes, each
//!   with its own policy instance on local counts or the tier's shared view (gossiped every
//!   period): Join-Idle-Queue, power of d, least-connections against K and load.
//! - [`cache`]: `capstan sim cache` — the HTTP cache's eviction policies (the switch's own code)
//!   and Belady's MIN replayed on request traces: hit ratios by cache size.

pub mod cache;
pub mod closed;
pub mod engine;
pub mod event;
pub mod policy;
pub mod queueing;
pub mod report;
pub mod results_md;
pub mod run;
pub mod scenario;
pub mod site;
pub mod stats;
pub mod sweb;
pub mod sweep;
pub mod sweep_report;
pub mod tier;

pub use engine::{dispatch_trace, RunConfig, RunResult};
pub use policy::{Metric, PolicyChoice};
pub use run::{Experiment, Report, RunInfo};
pub use scenario::Scenario;
