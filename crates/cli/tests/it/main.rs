//! capstan-cli's integration tests, one binary: each module was once a test file of
//! its own; in one binary they link once and share the test threads.

mod support;

mod agent_cli;
mod bench_cli;
mod bench_h3;
mod bench_sclient;
mod bench_targets;
mod bench_wan;
mod cache_cli;
mod docs;
mod first_hour;
mod golden;
mod http3;
mod lab_cache;
mod lab_churn;
mod lab_cli;
mod lab_jones;
mod lab_sclient;
mod lab_secure;
mod lab_tier;
mod lab_wan;
mod layers;
mod ops_cli;
mod origin_cli;
mod origin_processes;
mod origin_tls;
mod redirect_cli;
mod register_cli;
mod serve_cli;
mod sim_cli;
mod sim_sweeps;
mod sim_tier;
mod tier;
mod tier_discovery;
mod tls_cli;
