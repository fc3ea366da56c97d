//! Workload building blocks for Capstan: seeded random variates with pinned algorithms, the
//! document trees a back-end node serves (WebStone, Web Polygraph, the CAP paper's size law),
//! popularity (Zipf), request mixes with recurrence, arrival processes with phases, ramps and
//! bursts, the CAP paper's session model, and the WebStone file list and Common Log Format file
//! formats, and Web Polygraph workloads (robots, content types, working set, phases with goals).
//!
//! Pure by design: no clock, no I/O, no async. Parsers take strings; whoever reads the file owns
//! the I/O. Time, where it matters (object life cycles, arrival schedules), is passed in or
//! returned as numbers.
//!
//! Reproducibility: every stream is a [`rand_pcg::Pcg64`] seeded from the user's seed, and every
//! distribution is sampled by an algorithm written out here (inverse transform, Box–Muller,
//! Michael–Schucany–Haas, rejection-inversion), not by a library whose algorithm may change
//! between versions. The same seed therefore gives the same trees and requests on every platform
//! and release.

pub mod arrival;
pub mod clf;
pub mod dist;
pub mod filelist;
pub mod mix;
pub mod polygraph;
pub mod rng;
pub mod session;
pub mod tree;
pub mod zipf;

pub use arrival::{ArrivalKind, Arrivals, Burst, Phase, RateProfile};
pub use clf::{parse_clf, AccessLog, LogEntry, LogError};
pub use dist::Dist;
pub use filelist::{parse_filelist, FileList, FileListEntry, FileListError};
pub use mix::{RecurrenceMix, Weighted};
pub use polygraph::{Generator, PolyFile, PolyRequest, PolyWorkload};
pub use rng::{stream, WorkloadRng};
pub use session::{PagePlan, SessionModel};
pub use tree::{ContentBlock, DocFile, DocTree, LifeCycle, TreeError, TreeKind, Validators};
pub use zipf::Popularity;
