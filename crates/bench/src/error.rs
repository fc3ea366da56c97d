//! The crate's one error type, a leaf every module may use.

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Io(String),
    #[error("cannot merge: {0}")]
    Merge(String),
}
