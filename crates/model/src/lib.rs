//! Node resource models for Capstan: a processor-shared CPU, an FCFS disk, an LRU memory file
//! cache, a NIC and the SSL cost model of the CAP paper (Casalicchio & Colajanni, WWW10, §4.1 and
//! Table 2).
//!
//! Everything here is pure: time is a plain `f64` of seconds passed in by the caller, nothing reads
//! a clock, sleeps, spawns or does I/O. The live origin node (`capstan origin --resources
//! emulated`) drives these models with wall-clock seconds since it started; a discrete-event
//! simulator drives the very same code with virtual time. Calls must come with non-decreasing
//! `now` values, as both drivers naturally do.
//!
//! Service demands are expressed in seconds *at speed 1*; a node's `speed` factor divides them, so
//! `speed = 0.5` doubles every CPU and disk time.

mod cache;
mod cpu;
mod disk;
mod fcfs;
mod nic;
mod node;
mod ssl;

pub use cache::{FileId, LruBytes};
pub use cpu::{Completion, CpuPs, JobId};
pub use disk::{Disk, DiskParams};
pub use fcfs::{Fcfs, Slot};
pub use nic::{Nic, NicParams};
pub use node::{Demand, NodeParams};
pub use ssl::SslCosts;

/// Seconds, in whatever time base the caller uses (wall clock since start, or virtual time).
pub type Time = f64;

/// Work or service times below this are treated as zero, so float rounding never leaves a job
/// with a few femtoseconds of remaining work and an extra wake-up.
pub const EPSILON: f64 = 1e-12;
