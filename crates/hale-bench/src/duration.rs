//! The command line's durations (`--duration 10s`, `--warmup 500ms`): one
//! parser for every subcommand, so each reads them alike.

use std::time::Duration;

/// Parses `10s`, `1.5s`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (use e.g. 10s or 500ms)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("not a duration: {s:?}"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Serializes a duration as seconds (the JSON results' `args`).
pub fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_duration_takes_seconds_and_milliseconds() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
