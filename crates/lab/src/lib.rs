//! `capstan lab`: one command starts emulated back-end nodes and the web switch as child
//! processes, drives them with the load generator (in-process) once per dispatching policy and
//! load level, and writes a report (`index.html` with inline SVG plots, `results.json`).
//!
//! Cache experiments (`cache-mixed-inc`, `cache-best-effort`) run Web Polygraph workloads
//! against Capstan's cache, Varnish and Traffic Server instead ([`cache`]); WAN experiments
//! (`wan-delay`, `wan-loss`, `wan-mix`) put the load behind `capstan wan`'s delay router in
//! front of emulated nodes, the switch, apache2 and nginx ([`wan`]).
//!
//! ```no_run
//! # async fn f() -> Result<(), capstan_lab::LabError> {
//! use capstan_lab::{Experiment, Options, Plan};
//! let exp = Experiment::load("mix-6040")?;
//! let opts = Options { quick: true, exe: "target/release/capstan".into(), work_dir: "lab-report/logs".into(), ..Default::default() };
//! let plan = Plan::new(&exp, &opts)?;
//! let mut results = capstan_lab::run(&plan, &opts, None).await?;
//! capstan_lab::report::conclude(&mut results, &exp);
//! capstan_lab::report::write(&results, std::path::Path::new("lab-report"))?;
//! # Ok(()) }
//! ```

pub mod cache;
pub mod cache_plots;
pub mod cache_surrogates;
pub mod cache_verdicts;
pub mod cluster;
pub mod experiment;
pub mod figures;
pub mod http_path;
pub mod report;
pub mod report_sclient;
pub mod results;
pub mod runner;
pub mod secure;
pub mod servers;
pub mod simulate;
pub mod validate;
pub mod wan;

pub use experiment::{Experiment, BUILTIN, DEFAULT};
pub use results::LabResults;
pub use runner::{run, Event, Observer, Options, Plan};
pub use simulate::Worlds;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LabError {
    /// A bad experiment file or override.
    #[error("{0}")]
    Experiment(String),
    /// A node, the switch or the load generator failed.
    #[error("{0}")]
    Run(String),
    #[error("{0}")]
    Report(String),
}
