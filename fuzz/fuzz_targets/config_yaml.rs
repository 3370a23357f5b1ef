//! hale-config's config loading and validation (`hale_config::load`, what
//! `hale serve` and `hale config check` run) on arbitrary YAML text.
//!
//! Each input is loaded twice: with no environment (every `*_env` unset) and
//! with every variable set to a marker secret. Properties: nothing panics; a
//! rejection carries at least one error; no error text contains the secret's
//! value (unless the YAML itself does).
#![no_main]

use hale_config as raw;
use libfuzzer_sys::fuzz_target;

const SECRET: &str = "fz-Secret-Value-7Q2";

fuzz_target!(|data: &[u8]| {
    let Ok(yaml) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = raw::load(yaml, &|_| None) {
        assert!(!e.0.is_empty(), "a rejection without an error");
        let _ = e.to_string();
    }
    match raw::load(yaml, &|_| Some(SECRET.to_owned())) {
        Ok(_) => {}
        Err(e) => {
            assert!(!e.0.is_empty(), "a rejection without an error");
            let text = e.to_string();
            if !yaml.contains(SECRET) {
                assert!(!text.contains(SECRET), "an error shows a secret: {text}");
            }
        }
    }
});
