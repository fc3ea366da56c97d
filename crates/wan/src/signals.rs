//! SIGINT, SIGTERM and SIGHUP become a flag the main loop polls, so the set-up is always torn
//! down by the code that made it instead of the process dying mid-way.

use std::sync::atomic::{AtomicI32, Ordering};

static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    PENDING.store(sig, Ordering::SeqCst);
}

/// Installs the handlers for the whole process.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); `action` is a
        // zeroed, fully initialised sigaction that lives for the call.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The last signal received since the previous call, if any.
pub fn take() -> Option<i32> {
    match PENDING.swap(0, Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Sends `sig` to a process.
pub fn send(pid: u32, sig: i32) {
    // SAFETY: kill(2) passes no memory; pid is a child this process started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}
