//! Parsing of the quantities a path is described with: durations, rates, sizes, probabilities.
//!
//! Every parser returns a one-line error naming the bad text, so the command line and the TOML
//! file report mistakes the same way.

use std::time::Duration;

/// A queue limit: bytes or packets (drop-tail when the next packet would pass it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    Bytes(u64),
    Packets(u64),
    Unlimited,
}

/// `100ms`, `1.5s`, `250us`, `0`. Bare numbers are refused (the unit is not obvious).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let (number, unit) = split_number(t).ok_or_else(|| format!("bad duration '{text}'"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1e-9,
        "us" | "µs" | "usec" => 1e-6,
        "ms" | "msec" => 1e-3,
        "s" | "sec" => 1.0,
        "" => return Err(format!("duration '{text}' needs a unit (ns, us, ms, s)")),
        _ => return Err(format!("bad duration unit in '{text}' (ns, us, ms, s)")),
    };
    let secs = number * scale;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("duration '{text}' is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A rate in bits per second: `10mbit`, `10Mbit/s`, `10mbps`, `1gbit`, `56kbit`, `1.25MB/s`
/// (bytes), `0` or `unlimited` (no bandwidth limit: `None`). `k`, `m`, `g` are powers of 1000
/// as in networking; `bps` means bits (not tc's bytes), `B/s` means bytes.
pub fn parse_rate(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t == "0" || t.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let (number, unit) = split_number(t).ok_or_else(|| format!("bad rate '{text}'"))?;
    let (prefix, base) = rate_unit(unit).ok_or_else(|| {
        format!("bad rate unit in '{text}' (e.g. 56kbit, 10mbit, 1gbit, 10Mbit/s, 2MB/s)")
    })?;
    let bits = number * prefix * base;
    if !(1.0..=1e13).contains(&bits) {
        return Err(format!(
            "rate '{text}' is out of range (1 bit/s to 10 Tbit/s)"
        ));
    }
    Ok(Some(bits.round() as u64))
}

/// Splits a rate unit into (SI prefix factor, bits per unit): `mbit` → (1e6, 1), `MB/s` → (1e6, 8).
fn rate_unit(unit: &str) -> Option<(f64, f64)> {
    let u = unit.strip_suffix("/s").unwrap_or(unit);
    let (prefix, rest) = match u.chars().next() {
        Some('k' | 'K') => (1e3, &u[1..]),
        Some('m' | 'M') => (1e6, &u[1..]),
        Some('g' | 'G') => (1e9, &u[1..]),
        Some('t' | 'T') => (1e12, &u[1..]),
        _ => (1.0, u),
    };
    let base = match rest {
        "bit" | "bits" | "b" | "bps" | "Bit" | "Bits" => 1.0,
        "B" | "Bps" | "byte" | "bytes" => 8.0,
        _ => return None,
    };
    Some((prefix, base))
}

/// A queue limit: `64KB` (1000-based), `64KiB`, `1500B`, `100p` / `100pkt` / `100packets`,
/// `unlimited`.
pub fn parse_queue(text: &str) -> Result<QueueLimit, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t == "0" {
        return Ok(QueueLimit::Unlimited);
    }
    let (number, unit) = split_number(t).ok_or_else(|| format!("bad queue limit '{text}'"))?;
    if number < 1.0 || number.fract() != 0.0 && unit.starts_with('p') {
        return Err(format!("bad queue limit '{text}'"));
    }
    let bytes = |factor: f64| QueueLimit::Bytes((number * factor).round() as u64);
    let limit = match unit {
        "p" | "pkt" | "pkts" | "packet" | "packets" => QueueLimit::Packets(number as u64),
        "B" | "b" | "bytes" => bytes(1.0),
        "KB" | "kB" | "kb" => bytes(1e3),
        "MB" | "mb" => bytes(1e6),
        "KiB" | "kib" => bytes(1024.0),
        "MiB" | "mib" => bytes(1024.0 * 1024.0),
        "" => {
            return Err(format!(
                "queue limit '{text}' needs a unit (B, KB, KiB, MB, p)"
            ))
        }
        _ => {
            return Err(format!(
                "bad queue unit in '{text}' (B, KB, KiB, MB, MiB, p)"
            ))
        }
    };
    Ok(limit)
}

/// A probability: `1%`, `0.5 %`, `0.01`. Must lie in [0, 1].
pub fn parse_probability(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("bad probability '{text}' (e.g. 1% or 0.01)"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("probability '{text}' is outside 0–100 %"));
    }
    Ok(value)
}

/// Splits `12.5mbit` into (12.5, "mbit"); None when there is no leading number.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let number = text[..end].parse::<f64>().ok()?;
    Some((number, text[end..].trim()))
}

/// Formats bits per second the way they are usually written (`10mbit`).
pub fn format_rate(bits_per_s: Option<u64>) -> String {
    match bits_per_s {
        None => "unlimited".into(),
        Some(b) if b >= 1_000_000_000 && b % 1_000_000 == 0 => format!("{}gbit", b as f64 / 1e9),
        Some(b) if b >= 1_000_000 => format!("{}mbit", b as f64 / 1e6),
        Some(b) if b >= 1_000 => format!("{}kbit", b as f64 / 1e3),
        Some(b) => format!("{b}bit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("100").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("10 parsecs").is_err());
    }

    #[test]
    fn rates_are_bits_per_second_with_si_prefixes() {
        assert_eq!(parse_rate("10mbit"), Ok(Some(10_000_000)));
        assert_eq!(parse_rate("10Mbit/s"), Ok(Some(10_000_000)));
        assert_eq!(parse_rate("10mbps"), Ok(Some(10_000_000)));
        assert_eq!(parse_rate("56kbit"), Ok(Some(56_000)));
        assert_eq!(parse_rate("1gbit"), Ok(Some(1_000_000_000)));
        assert_eq!(parse_rate("2MB/s"), Ok(Some(16_000_000)));
        assert_eq!(parse_rate("unlimited"), Ok(None));
        assert_eq!(parse_rate("0"), Ok(None));
        assert!(parse_rate("10 furlongs").is_err());
        assert!(parse_rate("mbit").is_err());
    }

    #[test]
    fn queue_limits_in_bytes_or_packets() {
        assert_eq!(parse_queue("64KB"), Ok(QueueLimit::Bytes(64_000)));
        assert_eq!(parse_queue("64KiB"), Ok(QueueLimit::Bytes(65_536)));
        assert_eq!(parse_queue("100p"), Ok(QueueLimit::Packets(100)));
        assert_eq!(parse_queue("100 packets"), Ok(QueueLimit::Packets(100)));
        assert_eq!(parse_queue("unlimited"), Ok(QueueLimit::Unlimited));
        assert!(parse_queue("64").is_err());
        assert!(parse_queue("1.5p").is_err());
    }

    #[test]
    fn probabilities() {
        assert_eq!(parse_probability("1%"), Ok(0.01));
        assert_eq!(parse_probability("0.05"), Ok(0.05));
        assert!(parse_probability("150%").is_err());
        assert!(parse_probability("lots").is_err());
    }

    #[test]
    fn rate_formatting_round_trips() {
        for text in ["10mbit", "56kbit", "1gbit", "300bit"] {
            assert_eq!(format_rate(parse_rate(text).unwrap()), text);
        }
    }
}
