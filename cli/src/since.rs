//! `--since TIME`: an RFC 3339 time, or a duration back from now.

use std::time::{SystemTime, UNIX_EPOCH};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Parses a duration such as `500ms`, `30s`, `10m`, `2h`, `1d`, `1w` or a
/// sum of them (`1h30m`) into milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    Some(total)
}

/// Parses `--since`: an RFC 3339 time (`2024-05-01T12:00:00Z`,
/// `2024-05-01T14:00:00.5+02:00`) or a duration before `now_ms` (`10m`),
/// into milliseconds since the epoch.
pub fn parse_since_at(s: &str, now_ms: i64) -> Result<i64, String> {
    if let Ok(t) = OffsetDateTime::parse(s.trim(), &Rfc3339) {
        return i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000))
            .map_err(|_| format!("{s:?} is out of range"));
    }
    match parse_duration_ms(s) {
        Some(ms) => Ok(now_ms.saturating_sub(ms)),
        None => Err(format!(
            "expected an RFC 3339 time (2024-05-01T12:00:00Z) or a duration \
             back from now (30s, 10m, 2h, 1d, 1h30m), got {s:?}"
        )),
    }
}

/// The clap value parser of `--since`.
pub fn parse_since(s: &str) -> Result<i64, String> {
    parse_since_at(s, now_ms())
}

/// A timestamp in ms as RFC 3339 (UTC, milliseconds), or the number when it
/// is out of range.
pub fn format_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.replace_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
                .ok()
        })
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("500ms"), Some(500));
        assert_eq!(parse_duration_ms("30s"), Some(30_000));
        assert_eq!(parse_duration_ms("10m"), Some(600_000));
        assert_eq!(parse_duration_ms("2h"), Some(7_200_000));
        assert_eq!(parse_duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration_ms("1d"), Some(86_400_000));
        assert_eq!(parse_duration_ms("1w"), Some(604_800_000));
        for bad in ["", "10", "m", "10x", "-5m", "1.5h", "99999999999999999999h"] {
            assert_eq!(parse_duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn since() {
        let now = 1_700_000_000_000;
        assert_eq!(parse_since_at("10m", now), Ok(now - 600_000));
        assert_eq!(
            parse_since_at("2023-11-14T22:13:20Z", now),
            Ok(1_700_000_000_000)
        );
        assert_eq!(
            parse_since_at("2023-11-15T00:13:20.250+02:00", now),
            Ok(1_700_000_000_250)
        );
        assert!(parse_since_at("yesterday", now)
            .unwrap_err()
            .contains("RFC 3339"));
        assert!(parse_since_at("2023-13-45T00:00:00Z", now).is_err());
        assert_eq!(format_ms(1_700_000_000_250), "2023-11-14T22:13:20.25Z");
    }
}
