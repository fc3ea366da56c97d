//! capstan-report: the one toolkit every Capstan report (`capstan bench`, `capstan sim`,
//! `capstan lab`) draws with, so that they look and read alike.
//!
//! - [`html`]: escaping, the page skeleton (head, style sheet, title, run information) and tables;
//! - [`palette`]: twelve colours (and marker shapes) that stay apart when 7–12 series share a chart;
//! - [`chart`]: line charts with 95 % CI error bars and *direct labels* at the line ends (no
//!   legend box to decode), and CDF charts;
//! - [`stats`]: the mean and the 95 % confidence interval over repetitions (Student t), and a
//!   ratio of two contenders measured in pairs (Student t over the pairs' log ratios).
//!
//! Pure: no I/O, no clock, no async; everything returns a `String`.

pub mod chart;
pub mod html;
pub mod palette;
pub mod stats;

pub use chart::{Chart, Marker, Series, Stroke};
pub use html::{escape, Page, Table};
pub use stats::{Estimate, PairedRatio};
