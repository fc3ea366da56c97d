//! The request pipeline: checks → classify → route (redirect, tunnel, cache, forward) →
//! dispatch → respond → log.
//!
//! May use: `net`, `config`, `observe`, `state`, `upstream`.

pub mod cache;
pub mod checks;
pub mod dispatch;
pub mod redirect;
pub mod response;
pub mod tunnel;
