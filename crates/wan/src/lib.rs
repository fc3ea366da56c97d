//! `capstan wan`: a WAN delay router after Banga & Druschel (§4.4). Packets between a client
//! network namespace and the server side cross this process, which holds each one for
//! `latency + size / bandwidth + queueing` on its path (paths chosen by client address, each
//! direction with its own parameters), drops some by a loss model or a full queue, and sends it
//! on time — timer plus a short measured spin, not a periodic tick.
//!
//! Pure parts (time passed in): [`link`], [`loss`], [`delayline`], [`config`], [`units`],
//! [`packet`]. System parts: [`tun`], [`netns`], [`setup`], [`router`], [`pacer`],
//! [`control`], [`command`].

pub mod command;
pub mod config;
pub mod control;
pub mod delayline;
pub mod link;
pub mod loss;
pub mod netns;
pub mod pacer;
pub mod packet;
pub mod router;
pub mod setup;
pub mod signals;
pub mod stats;
pub mod tun;
pub mod units;

pub use command::{main, WanArgs};
pub use config::{Dir, PathConfig, WanConfig};
pub use link::{Link, LinkParams};
pub use router::{Router, RouterPlan};
pub use setup::Setup;
