//! capstan-origin's integration tests, one binary: each module was once a test file of
//! its own; in one binary they link once and share the test threads.

mod common;

mod emulated;
mod partition;
mod polygraph;
mod real;
mod tls;
mod workers;
