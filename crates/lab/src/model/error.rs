//! The lab's one error type: what went wrong, as the CLI prints it.

/// A lab error; its text is the whole message the CLI prints.
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

/// A chart error (capstan-report returns them as strings) as the lab's.
pub(crate) fn err(e: impl std::fmt::Display) -> LabError {
    LabError::Report(format!("plot: {e}"))
}
