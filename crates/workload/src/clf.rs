//! Common Log Format and Combined Log Format access logs:
//!
//! ```text
//! 127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "ref" "ua"
//! ```

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub host: String,
    /// Unix seconds (UTC).
    pub time: i64,
    pub method: String,
    pub path: String,
    pub status: u16,
    pub bytes: u64,
    /// 1-based line number in the source text.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LogError {
    pub line: usize,
    pub message: String,
}

/// A parsed log. Lines whose request is `"-"` (a client that sent nothing before its timeout),
/// `CONNECT` or `OPTIONS *` carry no document to replay and are counted in `skipped`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLog {
    pub entries: Vec<LogEntry>,
    pub skipped: usize,
}

pub fn parse_clf(text: &str) -> Result<AccessLog, LogError> {
    let mut log = AccessLog::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        match parse_line(raw, line) {
            Ok(Some(e)) => log.entries.push(e),
            Ok(None) => log.skipped += 1,
            Err(message) => return Err(LogError { line, message }),
        }
    }
    if log.entries.is_empty() {
        return Err(LogError {
            line: 0,
            message: "the log has no requests".into(),
        });
    }
    Ok(log)
}

fn parse_line(raw: &str, line: usize) -> Result<Option<LogEntry>, String> {
    let mut rest = raw.trim();
    let mut word = || -> Result<&str, String> {
        let end = rest
            .find(' ')
            .ok_or("line ends early (expected Common Log Format)")?;
        let w = &rest[..end];
        rest = rest[end..].trim_start();
        Ok(w)
    };
    let host = word()?.to_string();
    word()?;
    word()?;
    if !rest.starts_with('[') {
        return Err("expected [date] after host, ident and user (Common Log Format)".into());
    }
    let close = rest.find(']').ok_or("unterminated [date]")?;
    let time = parse_time(&rest[1..close])?;
    rest = rest[close + 1..].trim_start();
    if !rest.starts_with('"') {
        return Err("expected the quoted request line after the date".into());
    }
    let close = rest[1..].find('"').ok_or("unterminated request line")? + 1;
    let request = &rest[1..close];
    rest = rest[close + 1..].trim_start();
    let mut tail = rest.split_whitespace();
    let status = tail
        .next()
        .ok_or("missing status")?
        .parse::<u16>()
        .map_err(|_| "status is not a number".to_string())?;
    let bytes = match tail.next().ok_or("missing byte count")? {
        "-" => 0,
        b => b
            .parse::<u64>()
            .map_err(|_| format!("byte count is not a number: {b:?}"))?,
    };
    if request == "-" {
        return Ok(None);
    }
    let mut parts = request.split(' ');
    let method = parts.next().unwrap_or_default();
    let path = parts.next().ok_or("request line has no path")?;
    // `CONNECT host:port` and `OPTIONS *` name no document to fetch again.
    if method == "CONNECT" || path == "*" {
        return Ok(None);
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("bad method {method:?}"));
    }
    if !path.starts_with('/') {
        return Err(format!("path must start with '/', got {path:?}"));
    }
    Ok(Some(LogEntry {
        host,
        time,
        method: method.to_string(),
        path: path.to_string(),
        status,
        bytes,
        line,
    }))
}

/// `10/Oct/2000:13:55:36 -0700` to Unix seconds.
fn parse_time(s: &str) -> Result<i64, String> {
    let bad = || format!("bad date {s:?} (expected dd/Mon/yyyy:HH:MM:SS +zzzz)");
    let (dt, zone) = s.split_once(' ').ok_or_else(bad)?;
    let f: Vec<&str> = dt.split(['/', ':']).collect();
    if f.len() != 6 {
        return Err(bad());
    }
    let num = |i: usize, lo: i64, hi: i64| -> Result<i64, String> {
        let v: i64 = f[i].parse().map_err(|_| bad())?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(bad())
        }
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == f[1]).ok_or_else(bad)? as i64 + 1;
    let (day, year) = (num(0, 1, 31)?, num(2, 1970, 9999)?);
    let (h, m, sec) = (num(3, 0, 23)?, num(4, 0, 59)?, num(5, 0, 60)?);
    let zb = zone.as_bytes();
    // Bytes, not chars: a multi-byte character must not reach the slicing below.
    if zb.len() != 5 || !(zb[0] == b'+' || zb[0] == b'-') || !zb[1..].iter().all(u8::is_ascii_digit)
    {
        return Err(bad());
    }
    let zh: i64 = zone[1..3].parse().map_err(|_| bad())?;
    let zm: i64 = zone[3..5].parse().map_err(|_| bad())?;
    let offset = (zh * 3600 + zm * 60) * if zb[0] == b'-' { -1 } else { 1 };
    Ok(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_and_combined_lines() {
        let log = parse_clf(
            "127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET /apache_pb.gif HTTP/1.0\" 200 2326\n\
             \n\
             10.0.0.2 - - [10/Oct/2000:20:55:37 +0000] \"POST /cgi-bin/x?a=b HTTP/1.1\" 404 - \"http://r/\" \"Mozilla/5.0 (X)\"\n\
             10.0.0.3 - - [10/Oct/2000:20:55:38 +0000] \"-\" 408 0\n\
             10.0.0.4 - - [10/Oct/2000:20:55:38 +0000] \"CONNECT example.org:443 HTTP/1.1\" 405 120\n\
             10.0.0.4 - - [10/Oct/2000:20:55:38 +0000] \"OPTIONS * HTTP/1.1\" 200 -\n",
        )
        .unwrap();
        assert_eq!(log.entries.len(), 2);
        assert_eq!(log.skipped, 3);
        let a = &log.entries[0];
        assert_eq!(a.time, 971_211_336);
        assert_eq!(
            (a.method.as_str(), a.path.as_str(), a.status, a.bytes),
            ("GET", "/apache_pb.gif", 200, 2326)
        );
        let b = &log.entries[1];
        assert_eq!(b.time - a.time, 1);
        assert_eq!(
            (b.method.as_str(), b.path.as_str(), b.bytes, b.line),
            ("POST", "/cgi-bin/x?a=b", 0, 3)
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_clf(
            "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /a HTTP/1.0\" 200 1\nnonsense\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        let e =
            parse_clf("h - - [32/Oct/2000:13:55:36 -0700] \"GET /a HTTP/1.0\" 200 1").unwrap_err();
        assert!(e.message.contains("bad date"), "{e}");
        let e =
            parse_clf("h - - [10/Oct/2000:13:55:36 -0700] \"GET a HTTP/1.0\" 200 1").unwrap_err();
        assert!(e.message.contains("path"), "{e}");
        // Found by fuzzing (fuzz/corpus/input_files): a zone of five bytes, not five ASCII
        // characters, once panicked on a char boundary.
        let e = parse_clf("h - - [10/Oct/2000:3:55:36 -0\u{463}0] \"GET /a HTTP/1.0\" 200 1")
            .unwrap_err();
        assert!(e.message.contains("bad date"), "{e}");
        assert!(parse_clf("\n")
            .unwrap_err()
            .to_string()
            .contains("no requests"));
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }
}
