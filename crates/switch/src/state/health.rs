//! A node's active-check state (HAProxy's `check`): results in a row, up or down, and what
//! `/status` shows of it. Only the checking task ([`crate::control::health`]) writes it; the
//! request path reads it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

/// What one check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckResult {
    pub passed: bool,
    /// The response's status, when one arrived.
    pub status: Option<u16>,
    /// Why it failed, when no response arrived or its status was not expected.
    pub error: Option<String>,
}

/// A node's active-check state. Only the checking task writes it; `/status` and the request
/// path read it.
#[derive(Debug)]
pub struct CheckState {
    down: AtomicBool,
    /// Results in a row that agree with the last one.
    consecutive: AtomicU32,
    last_passed: AtomicBool,
    /// The last response's status; 0 when the last check got none (or there was none yet).
    last_status: AtomicU32,
    passed: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Default for CheckState {
    /// A node starts up: checks take it out only after `fall` failures, so a switch (or a node
    /// added at run time) serves from the first moment.
    fn default() -> Self {
        CheckState {
            down: AtomicBool::new(false),
            consecutive: AtomicU32::new(0),
            last_passed: AtomicBool::new(true),
            last_status: AtomicU32::new(0),
            passed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }
}

/// A node's check state as `/status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct CheckStatus {
    /// `up` or `down`.
    pub state: &'static str,
    /// `passed`, `failed`, or absent before the first check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<&'static str>,
    /// The last check's response status; absent when it got none.
    pub last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Checks in a row with the last one's result.
    pub consecutive: u32,
    pub passed: u64,
    pub failed: u64,
}

impl CheckState {
    pub(crate) fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Records a check; returns the node's new state (`true`: up) when this check changed it.
    pub(crate) fn record(&self, result: &CheckResult, rise: u32, fall: u32) -> Option<bool> {
        let counter = if result.passed {
            &self.passed
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let same = self.last_passed.swap(result.passed, Ordering::Relaxed) == result.passed;
        let consecutive = match same {
            true => self.consecutive.load(Ordering::Relaxed).saturating_add(1),
            false => 1,
        };
        self.consecutive.store(consecutive, Ordering::Relaxed);
        self.last_status
            .store(result.status.map_or(0, u32::from), Ordering::Relaxed);
        if let Ok(mut error) = self.last_error.lock() {
            error.clone_from(&result.error);
        }
        let down = self.down.load(Ordering::Relaxed);
        let flip = match result.passed {
            true => down && consecutive >= rise,
            false => !down && consecutive >= fall,
        };
        flip.then(|| {
            self.down.store(!result.passed, Ordering::Relaxed);
            result.passed
        })
    }

    /// Forgets every result: the node is up (checks were turned off or now ask another path).
    pub(crate) fn reset(&self) {
        self.down.store(false, Ordering::Relaxed);
        self.consecutive.store(0, Ordering::Relaxed);
        self.last_passed.store(true, Ordering::Relaxed);
        self.last_status.store(0, Ordering::Relaxed);
        if let Ok(mut error) = self.last_error.lock() {
            *error = None;
        }
    }

    /// Takes over another state (a node rebuilt with a new weight stays as checks left it).
    pub(crate) fn copy_from(&self, other: &CheckState) {
        for (to, from) in [
            (&self.down, &other.down),
            (&self.last_passed, &other.last_passed),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (to, from) in [
            (&self.consecutive, &other.consecutive),
            (&self.last_status, &other.last_status),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        if let (Ok(mut to), Ok(from)) = (self.last_error.lock(), other.last_error.lock()) {
            to.clone_from(&from);
        }
    }

    pub(crate) fn status(&self) -> CheckStatus {
        let checks = self.passed.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        let consecutive = self.consecutive.load(Ordering::Relaxed);
        let last = (checks > 0 && consecutive > 0).then(|| {
            match self.last_passed.load(Ordering::Relaxed) {
                true => "passed",
                false => "failed",
            }
        });
        CheckStatus {
            state: if self.is_up() { "up" } else { "down" },
            last,
            last_status: u16::try_from(self.last_status.load(Ordering::Relaxed))
                .ok()
                .filter(|&s| s != 0),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            consecutive,
            passed: self.passed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}
