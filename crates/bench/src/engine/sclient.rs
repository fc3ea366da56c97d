//! The S-Client engine (Banga & Druschel §4.2): a fixed set of D sockets, each in a loop of
//! non-blocking connect, abandon after T if not established, connect again. An established
//! connection gets its request and is handed to its own task (the paper's connection-handling
//! process), and the socket starts its next attempt T after the previous one began (the
//! paper's "constant think time chosen to achieve a certain constant request rate", §4.2), so
//! each socket makes one attempt per T and the attempt rate is D/T whatever the server does:
//! it does not fall into TCP's SYN back-off, it does not wait for responses, and a fast server
//! does not turn it into a connection storm.
//!
//! Counting: every attempt is `offered` (the paper's "request rate" is SYNs per second at the
//! server); an abandoned attempt is a `connect_timeouts` and, never started, ends up `dropped`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::lane::Lane;
use crate::config::Engine;
use crate::error::BenchError;
use crate::http::{self, Conn, ErrorKind};
use crate::source::Picker;

/// Runs this lane's share of the D sockets until the window ends.
pub(super) async fn run(l: Rc<Lane>, lane: u64) -> Result<(), BenchError> {
    let Engine::SClient { sockets } = l.ctx.cfg.engine else {
        unreachable!("sclient::run runs the S-Client engine only");
    };
    let lanes = l.ctx.lanes;
    let mine = sockets as u64 / lanes + u64::from(lane < sockets as u64 % lanes);
    let picker = Rc::new(RefCell::new(Picker::new(&l.ctx.cfg, &l.ctx.table, lane)?));
    let end = l.window_end();
    let t = l.ctx.cfg.connect_timeout;
    for socket in 0..mine {
        let (l, picker) = (l.clone(), picker.clone());
        // The paper spaces the D first attempts over T, so attempts do not come in waves.
        let first = l.ctx.t0 + t.mul_f64(socket as f64 / mine.max(1) as f64);
        tokio::task::spawn_local(async move {
            tokio::time::sleep_until(first.into()).await;
            while Instant::now() < end {
                attempt(&l, &picker, t).await;
            }
        });
    }
    tokio::time::sleep_until(end.into()).await;
    Ok(())
}

/// One connect attempt of one socket, at most `t` long.
async fn attempt(l: &Rc<Lane>, picker: &RefCell<Picker>, t: Duration) {
    let idx = picker.borrow_mut().next(None);
    let began = Instant::now();
    {
        let mut s = l.stats.borrow_mut();
        s.offered(began);
        s.connect_attempts += 1;
    }
    let target = l.next_target();
    match http::connect(l.ctx.addrs[target], l.next_source(), t).await {
        Ok(stream) => {
            l.stats.borrow_mut().targets[target].connects += 1;
            l.stats.borrow_mut().connected(began, Instant::now());
            l.pending.set(l.pending.get() + 1);
            let l = l.clone();
            // Hand-off: the response is read by its own task while this socket connects again.
            let handler = l.clone();
            tokio::task::spawn_local(async move {
                let mut c = Conn::new(stream);
                c.target = target;
                let mut conn = Some(c);
                handler.fetch(&mut conn, idx, began, false).await;
                handler.pending.set(handler.pending.get() - 1);
            });
            // The think time: the next attempt of this socket is due T after this one began.
            tokio::time::sleep_until((began + t).into()).await;
        }
        Err(ErrorKind::ConnectTimeout) => {
            // Abandoned: closing an unestablished socket sends nothing.
            let mut s = l.stats.borrow_mut();
            s.connect_timeouts += 1;
            s.targets[target].refused += 1;
        }
        Err(kind) => {
            let now = Instant::now();
            {
                let mut s = l.stats.borrow_mut();
                s.started(began, now);
                s.targets[target].refused += 1;
                s.targets[target].errors += 1;
                s.error(l.ctx.table.requests[idx as usize].class, kind, now);
            }
            // A refused or failed attempt holds its socket for the rest of T rather than
            // spinning: the rate stays D/T, as with a server that does not answer.
            tokio::time::sleep_until((began + t).into()).await;
        }
    }
}
