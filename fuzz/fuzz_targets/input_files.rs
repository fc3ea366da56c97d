//! Files users hand to Capstan: access logs for `capstan bench --replay` (Common/Combined Log
//! Format) and WebStone file lists for the lab. Untrusted bytes give entries or a one-line error,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match capstan_workload::parse_clf(text) {
        Ok(log) => assert!(log.entries.len() <= text.lines().count()),
        Err(e) => assert!(
            !e.to_string().trim_end().contains('\n'),
            "one-line error: {e}"
        ),
    }
    if let Err(e) = capstan_workload::parse_filelist(text) {
        assert!(
            !e.to_string().trim_end().contains('\n'),
            "one-line error: {e}"
        );
    }
});
