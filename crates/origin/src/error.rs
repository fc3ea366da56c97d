//! The crate's one error type, a leaf every module may use.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("{0}")]
    Config(String),
    // The io::Error is part of the message rather than a `source`, so that error chains printed
    // with `{:#}` do not repeat it.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("{0}")]
    Tree(#[from] capstan_workload::TreeError),
}
