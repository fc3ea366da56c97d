//! The stats socket: a Unix socket in the set-up's directory that answers every connection
//! with the router's latest report as JSON, and the client `capstan wan stats` uses.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::stats::Report;

/// Serves reports until dropped.
#[derive(Debug)]
pub struct StatsServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatsServer {
    pub fn start(path: &Path, report: Arc<Mutex<Report>>) -> Result<StatsServer> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wan-stats".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(mut conn) = conn {
                        let r = report.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let _ = conn
                            .write_all(serde_json::to_string(&r).unwrap_or_default().as_bytes());
                    }
                }
            })
            .context("cannot start the stats thread")?;
        Ok(StatsServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the blocking accept so the thread sees the stop flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Asks a set-up's stats socket for its report.
pub fn query(path: &Path) -> Result<Report> {
    let mut conn = UnixStream::connect(path)
        .with_context(|| format!("cannot connect to {}", path.display()))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)?;
    serde_json::from_str(&text).context("bad report from the router")
}
