//! `capstan lab`: one command starts emulated back-end nodes and the web switch as child
//! processes, drives them with the load generator (in-process) once per dispatching policy and
//! load level — and the paper's claims (`[load.headline]`) in interleaved rounds, so that each
//! comes with a 95 % interval — and writes a report (`index.html` with inline SVG plots,
//! `results.json`).
//!
//! Cache experiments (`cache-mixed-inc`, `cache-best-effort`) run Web Polygraph workloads
//! against Capstan's cache, Varnish and Traffic Server instead ([`run_cache`]); WAN experiments
//! (`wan-delay`, `wan-loss`, `wan-mix`) put the load behind `capstan wan`'s delay router in
//! front of emulated nodes, the switch, apache2 and nginx ([`run_wan`]). The `churn`
//! experiment adds and removes nodes through a `[[discovery]]` file, or nodes registering
//! themselves in an etcd it starts, under load and compares it with static membership
//! ([`run_churn`]). The `tier` experiment starts K switches on their own loopback addresses
//! and CPU quotas and measures capacity against K, a tier's cache and a switch killed mid-run
//! ([`run_tier`]).
//!
//! The modules form four layers, each using only those below it: `model` (experiment and
//! result schema, the papers' rows) → `procs` (cluster, servers, daemons) → `run` (runner,
//! secure clients, HTTP path, simulation, validation, cache and WAN experiments) → `report`.
//! All are private; what the CLI uses is re-exported here.
//!
//! ```no_run
//! # async fn f() -> Result<(), capstan_lab::LabError> {
//! use capstan_lab::{Experiment, Options, Plan};
//! let exp = Experiment::load("mix-6040")?;
//! let opts = Options { quick: true, exe: "target/release/capstan".into(), work_dir: "lab-report/logs".into(), ..Default::default() };
//! let plan = Plan::new(&exp, &opts)?;
//! let mut results = capstan_lab::run(&plan, &opts, None).await?;
//! capstan_lab::conclude(&mut results, &exp);
//! capstan_lab::write_report(&results, std::path::Path::new("lab-report"))?;
//! # Ok(()) }
//! ```

mod model;
mod procs;
mod report;
mod run;

pub use model::cache::{CacheExperiment, CacheOptions, Mode as CacheMode, BUILTIN_CACHE};
pub use model::churn::{ChurnResults, RegistryKind, NAME as CHURN};
pub use model::error::LabError;
pub use model::experiment::{Experiment, BUILTIN, DEFAULT};
pub use model::results::{fmt_level, LabResults};
pub use model::tier::{Scale as TierScale, TierResults, NAME as TIER};
pub use model::wan::{
    check_contender as check_wan_contender, Mode as WanMode, WanExperiment, WanOptions, BUILTIN_WAN,
};
pub use report::cache::{summary_table as cache_summary_table, write_report as write_cache_report};
pub use report::churn::{summary_table as churn_summary_table, write_report as write_churn_report};
pub use report::experiment::{conclude, summary_table, write as write_report};
pub use report::tier::{summary_table as tier_summary_table, write_report as write_tier_report};
pub use report::wan::{summary_table as wan_summary_table, write_report as write_wan_report};
pub use run::cache::run_cache;
pub use run::churn::{run_churn, ChurnOptions};
pub use run::plan::{Event, Observer, Options, Plan, Worlds};
pub use run::runner::run;
pub use run::simulate::{
    attach as attach_sim, check as check_sim, run as simulate, sim_only_results, Shape as SimShape,
};
pub use run::tier::{run_tier, TierOptions};
pub use run::validate::{
    run as run_validation, summary_table as validation_summary_table, write as write_validation,
    Schedule, ValidateOptions, CASES,
};
pub use run::wan::run_wan;

/// What only tests and examples use: the lab's process helpers and the validation's verdict.
#[doc(hidden)]
pub mod testing {
    pub use crate::procs::cluster::free_loopback_port;
    pub use crate::procs::servers::{
        ensure_installed, tcp_counts, write_tree, RunningServer, ServerKind, ServerSpec,
        APACHE_START_SERVERS,
    };
    pub use crate::run::validate::verdict;
}
