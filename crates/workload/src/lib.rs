//! Workload building blocks for Capstan: seeded random variates with pinned algorithms, the
//! document trees a back-end node serves (WebStone, Web Polygraph, the CAP paper's size law), and
//! the WebStone file list format.
//!
//! Pure by design: no clock, no I/O, no async. Parsers take strings; whoever reads the file owns
//! the I/O. Time, where it matters (object life cycles), is passed in as Unix seconds.
//!
//! Reproducibility: every stream is a [`rand_pcg::Pcg64`] seeded from the user's seed, and every
//! distribution is sampled by an algorithm written out here (inverse transform, Box–Muller,
//! Michael–Schucany–Haas), not by a library whose algorithm may change between versions. The same
//! seed therefore gives the same trees and requests on every platform and release.

pub mod dist;
pub mod filelist;
pub mod rng;
pub mod tree;

pub use dist::Dist;
pub use filelist::{parse_filelist, FileList, FileListEntry, FileListError};
pub use rng::{stream, WorkloadRng};
pub use tree::{ContentBlock, DocFile, DocTree, LifeCycle, TreeError, TreeKind, Validators};
