//! Range requests answered from a complete stored representation (RFC 9110 §14): parsing
//! `Range` and `If-Range`, `Content-Range` values, and `multipart/byteranges` framing (§14.6).
//!
//! Ranges are byte offsets into the stored body as half-open `start..end` ranges. The cache
//! may always ignore `Range` and send the full representation (§14.2), which is what happens
//! for anything malformed, conditional on a changed representation, or looking abusive.

use std::ops::Range;

use http::header::{DATE, IF_RANGE, LAST_MODIFIED, RANGE};
use http::{HeaderMap, HeaderValue, Method};

use super::fields::{header_date, parse_date, parse_u64_saturating, stored_etag, EntityTag};

/// Most ranges accepted in one request; more is treated as abuse and the full representation
/// is sent instead.
pub const MAX_RANGES: usize = 64;

/// Most ranges that may overlap another one (RFC 9110 §14.2 names "more than two overlapping
/// ranges" as a sign of a broken client or an attack).
const MAX_OVERLAPPING: usize = 2;

/// How to answer a request against a stored representation of `full_len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeAnswer {
    /// Send the whole representation (`200`): no `Range`, not `GET`, an `If-Range` that does not
    /// match, a non-`bytes` unit, invalid syntax, or an abusive set of ranges.
    Full,
    /// Send these ranges (`206`), in request order, overlapping or adjacent ones coalesced;
    /// each range is non-empty and within the representation. One range: a single part with
    /// [`content_range`]; several: [`Multipart`].
    Partial(Vec<Range<u64>>),
    /// No range can be satisfied: `416` with [`unsatisfied_content_range`].
    Unsatisfiable,
}

/// One `range-spec` as written (RFC 9110 §14.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeSpec {
    /// `first-[last]`, inclusive.
    FromTo(u64, Option<u64>),
    /// `-N`: the last N bytes.
    Suffix(u64),
}

/// Decides how to answer a request's `Range` from a stored representation of `full_len` bytes
/// (see [`RangeAnswer`] for the cases). `If-Range` (RFC 9110 §13.1.5) must match the stored
/// response: an entity tag by strong comparison, a date by being exactly the stored
/// `Last-Modified` and that date being strong (at least a second before the stored `Date`).
pub fn parse_range(
    method: &Method,
    req: &HeaderMap,
    stored_resp: &HeaderMap,
    full_len: u64,
) -> RangeAnswer {
    if method != Method::GET {
        return RangeAnswer::Full;
    }
    let mut lines = req.get_all(RANGE).iter();
    let (Some(range), None) = (lines.next(), lines.next()) else {
        return RangeAnswer::Full;
    };
    if !if_range_matches(req, stored_resp) {
        return RangeAnswer::Full;
    }
    let Some(specs) = range.to_str().ok().and_then(parse_byte_ranges) else {
        return RangeAnswer::Full;
    };
    satisfy(&specs, full_len)
}

fn if_range_matches(req: &HeaderMap, stored_resp: &HeaderMap) -> bool {
    let Some(if_range) = req.get(IF_RANGE) else {
        return true;
    };
    if let Some(tag) = EntityTag::parse(if_range.as_bytes()) {
        return stored_etag(stored_resp).is_some_and(|stored| tag.strong_eq(&stored));
    }
    let (Some(date), Some(lm), Some(served)) = (
        parse_date(if_range),
        header_date(stored_resp, LAST_MODIFIED),
        header_date(stored_resp, DATE),
    ) else {
        return false;
    };
    // RFC 9110 §8.8.2.2: a Last-Modified is strong only if at least a second older than Date.
    let strong = served.duration_since(lm).is_ok_and(|d| d.as_secs() >= 1);
    date == lm && strong
}

/// Parses `bytes=` range sets; `None` for other units or any invalid spec (then the whole field
/// is ignored, RFC 9110 §14.2) and for more than [`MAX_RANGES`] specs.
fn parse_byte_ranges(value: &str) -> Option<Vec<RangeSpec>> {
    let (unit, set) = value.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for item in set.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if specs.len() == MAX_RANGES {
            return None;
        }
        specs.push(parse_spec(item)?);
    }
    (!specs.is_empty()).then_some(specs)
}

fn parse_spec(item: &str) -> Option<RangeSpec> {
    if let Some(suffix) = item.strip_prefix('-') {
        return Some(RangeSpec::Suffix(parse_u64_saturating(suffix)?));
    }
    let (first, last) = item.split_once('-')?;
    let first = parse_u64_saturating(first)?;
    if last.is_empty() {
        return Some(RangeSpec::FromTo(first, None));
    }
    let last = parse_u64_saturating(last)?;
    (last >= first).then_some(RangeSpec::FromTo(first, Some(last)))
}

/// Turns specs into satisfiable byte ranges (RFC 9110 §14.1.1-3), then coalesces them.
fn satisfy(specs: &[RangeSpec], full_len: u64) -> RangeAnswer {
    let ranges: Vec<Range<u64>> = specs
        .iter()
        .filter_map(|spec| match *spec {
            RangeSpec::FromTo(first, _) if first >= full_len => None,
            RangeSpec::FromTo(first, last) => {
                let end = last.map_or(full_len, |l| l.saturating_add(1).min(full_len));
                Some(first..end)
            }
            RangeSpec::Suffix(0) => None,
            RangeSpec::Suffix(n) => (full_len > 0).then(|| full_len.saturating_sub(n)..full_len),
        })
        .collect();
    if ranges.is_empty() {
        // §14.1.3: on an empty representation only a non-zero suffix is satisfiable; there is
        // nothing to send but the (empty) whole.
        let nonzero_suffix = specs
            .iter()
            .any(|s| matches!(s, RangeSpec::Suffix(n) if *n > 0));
        return if full_len == 0 && nonzero_suffix {
            RangeAnswer::Full
        } else {
            RangeAnswer::Unsatisfiable
        };
    }
    if overlapping_count(&ranges) > MAX_OVERLAPPING {
        return RangeAnswer::Full;
    }
    RangeAnswer::Partial(coalesce(ranges))
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// How many ranges overlap at least one other.
fn overlapping_count(ranges: &[Range<u64>]) -> usize {
    ranges
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            ranges
                .iter()
                .enumerate()
                .any(|(j, b)| *i != j && overlaps(a, b))
        })
        .count()
}

/// Merges overlapping or adjacent ranges (RFC 9110 §14.2 allows it), keeping each merged range
/// at the position of its earliest member so the request order otherwise holds.
fn coalesce(ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        out.push(range);
        // Merging may make the grown range touch an earlier one: repeat until nothing touches.
        while let Some((i, j)) = touching_pair(&out) {
            let merged = out[i].start.min(out[j].start)..out[i].end.max(out[j].end);
            out[i] = merged;
            out.remove(j);
        }
    }
    out
}

fn touching_pair(ranges: &[Range<u64>]) -> Option<(usize, usize)> {
    for i in 0..ranges.len() {
        for j in i + 1..ranges.len() {
            let (a, b) = (&ranges[i], &ranges[j]);
            if a.start <= b.end && b.start <= a.end {
                return Some((i, j));
            }
        }
    }
    None
}

/// The `Content-Range` value for one part: `bytes first-last/full_len` (RFC 9110 §14.4), for a
/// non-empty range from [`RangeAnswer::Partial`].
pub fn content_range(range: &Range<u64>, full_len: u64) -> HeaderValue {
    let last = range.end.saturating_sub(1).max(range.start);
    HeaderValue::try_from(format!("bytes {}-{}/{}", range.start, last, full_len))
        .expect("digits and ASCII only")
}

/// The `Content-Range` value of a `416`: `bytes */full_len` (RFC 9110 §15.5.17).
pub fn unsatisfied_content_range(full_len: u64) -> HeaderValue {
    HeaderValue::try_from(format!("bytes */{full_len}")).expect("digits and ASCII only")
}

/// Why a [`Multipart`] body cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    /// The boundary is not 1–70 characters of RFC 2046 `bchars` not ending in a space.
    #[error("invalid multipart boundary")]
    Boundary,
    /// No ranges, or a range empty or beyond the representation.
    #[error("ranges must be non-empty and within the representation")]
    Range,
}

/// The framing of a `multipart/byteranges` body (RFC 9110 §14.6): the head of each part, the
/// closing delimiter, and the exact body length, so the caller can set `Content-Length` and
/// stream `head, stored[range]` for each part followed by the closing delimiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multipart {
    boundary: String,
    heads: Vec<Vec<u8>>,
    ranges: Vec<Range<u64>>,
    closing: Vec<u8>,
    body_len: u64,
}

impl Multipart {
    /// Frames `ranges` of a representation of `full_len` bytes. `content_type` is the stored
    /// response's `Content-Type`, repeated in each part; `boundary` should be random enough not
    /// to occur in the body (the caller's choice: this code draws no random numbers).
    pub fn new(
        ranges: &[Range<u64>],
        full_len: u64,
        content_type: Option<&HeaderValue>,
        boundary: &str,
    ) -> Result<Multipart, MultipartError> {
        if !valid_boundary(boundary) {
            return Err(MultipartError::Boundary);
        }
        if ranges.is_empty() || ranges.iter().any(|r| r.start >= r.end || r.end > full_len) {
            return Err(MultipartError::Range);
        }
        let heads: Vec<Vec<u8>> = ranges
            .iter()
            .enumerate()
            .map(|(i, range)| part_head(i == 0, boundary, content_type, range, full_len))
            .collect();
        let closing = format!("\r\n--{boundary}--\r\n").into_bytes();
        let body_len = heads.iter().map(|h| h.len() as u64).sum::<u64>()
            + ranges.iter().map(|r| r.end - r.start).sum::<u64>()
            + closing.len() as u64;
        Ok(Multipart {
            boundary: boundary.to_owned(),
            heads,
            ranges: ranges.to_vec(),
            closing,
            body_len,
        })
    }

    /// The response's `Content-Type`: `multipart/byteranges; boundary=…`.
    pub fn content_type(&self) -> HeaderValue {
        // bchars include characters that are not tchars (space, '(', ',', '/', ':', '=', '?'):
        // such a boundary must be a quoted string in the parameter (RFC 9110 §5.6.6).
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        let value = if self.boundary.bytes().all(tchar) {
            format!("multipart/byteranges; boundary={}", self.boundary)
        } else {
            format!("multipart/byteranges; boundary=\"{}\"", self.boundary)
        };
        HeaderValue::try_from(value).expect("boundary validated as printable bchars")
    }

    /// Each part's head (delimiter and part fields) with the stored byte range that follows it.
    pub fn parts(&self) -> impl Iterator<Item = (&[u8], Range<u64>)> {
        self.heads
            .iter()
            .map(Vec::as_slice)
            .zip(self.ranges.iter().cloned())
    }

    /// The closing delimiter, sent after the last part.
    pub fn closing(&self) -> &[u8] {
        &self.closing
    }

    /// The exact length of the whole body: heads, ranges and closing delimiter.
    pub fn body_len(&self) -> u64 {
        self.body_len
    }
}

fn part_head(
    first: bool,
    boundary: &str,
    content_type: Option<&HeaderValue>,
    range: &Range<u64>,
    full_len: u64,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(96);
    if !first {
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    if let Some(ct) = content_type {
        head.extend_from_slice(b"Content-Type: ");
        head.extend_from_slice(ct.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Content-Range: ");
    head.extend_from_slice(content_range(range, full_len).as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    head
}

/// RFC 2046 §5.1.1: `boundary := 0*69<bchars> bcharsnospace`.
fn valid_boundary(boundary: &str) -> bool {
    let bchar = |b: u8| b.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(&b);
    (1..=70).contains(&boundary.len()) && boundary.bytes().all(bchar) && !boundary.ends_with(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: u64 = 10;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    fn ranged(range: &'static str) -> RangeAnswer {
        parse_range(
            &Method::GET,
            &headers(&[("range", range)]),
            &HeaderMap::new(),
            LEN,
        )
    }

    fn partial(ranges: &[Range<u64>]) -> RangeAnswer {
        RangeAnswer::Partial(ranges.to_vec())
    }

    fn one(range: Range<u64>) -> RangeAnswer {
        RangeAnswer::Partial(vec![range])
    }

    #[test]
    fn first_byte_only() {
        // RFC 9110 §14.1.2: bytes=0-0
        assert_eq!(ranged("bytes=0-0"), one(0..1));
    }

    #[test]
    fn suffix_range_last_byte() {
        // RFC 9110 §14.1.2: bytes=-1 is the final byte
        assert_eq!(ranged("bytes=-1"), one(9..10));
        assert_eq!(
            ranged("bytes=-100"),
            one(0..10),
            "suffix longer than the body"
        );
    }

    #[test]
    fn open_ended_range() {
        // RFC 9110 §14.1.2: bytes=5-
        assert_eq!(ranged("bytes=5-"), one(5..10));
        assert_eq!(
            ranged("bytes=5-999999999999999999999999"),
            one(5..10),
            "clamped"
        );
    }

    #[test]
    fn multiple_ranges_in_request_order() {
        // RFC 9110 §14.1.2
        assert_eq!(ranged("bytes=0-1,4-5"), partial(&[0..2, 4..6]));
        assert_eq!(ranged("bytes=7-8, 0-1"), partial(&[7..9, 0..2]));
        assert_eq!(
            ranged("BYTES=0-1 ,, 4-5"),
            partial(&[0..2, 4..6]),
            "unit case, empty elements"
        );
    }

    #[test]
    fn overlapping_ranges_coalesced() {
        // RFC 9110 §14.2: a server MAY coalesce overlapping ranges.
        assert_eq!(ranged("bytes=0-4,3-6"), one(0..7));
        assert_eq!(
            ranged("bytes=6-7,0-1,2-5"),
            one(0..8),
            "adjacent chain merged"
        );
    }

    #[test]
    fn abusive_overlaps_and_too_many_ranges_get_full() {
        // RFC 9110 §14.2: more than two overlapping ranges may be ignored.
        assert_eq!(ranged("bytes=0-5,1-5,2-5"), RangeAnswer::Full);
        let many: String = (0..=MAX_RANGES).map(|i| format!("{i}-{i},")).collect();
        let mut req = HeaderMap::new();
        req.insert(
            RANGE,
            HeaderValue::try_from(format!("bytes={many}")).unwrap(),
        );
        assert_eq!(
            parse_range(&Method::GET, &req, &HeaderMap::new(), 1000),
            RangeAnswer::Full
        );
    }

    #[test]
    fn out_of_range_unsatisfiable() {
        // RFC 9110 §14.1.1: first-pos past the end is unsatisfiable; §15.5.17 → 416
        assert_eq!(ranged("bytes=10-20"), RangeAnswer::Unsatisfiable);
        assert_eq!(ranged("bytes=-0"), RangeAnswer::Unsatisfiable);
        assert_eq!(
            ranged("bytes=10-,3-"),
            one(3..10),
            "one satisfiable is enough"
        );
        assert_eq!(unsatisfied_content_range(LEN), "bytes */10");
    }

    #[test]
    fn bad_syntax_ignored() {
        // RFC 9110 §14.2: a server MAY ignore an invalid Range.
        for bad in [
            "bytes=5-2",
            "bytes=a-b",
            "bytes=",
            "items=0-1",
            "bytes 0-1",
            "bytes=0-1,x",
        ] {
            assert_eq!(ranged(bad), RangeAnswer::Full, "{bad}");
        }
    }

    #[test]
    fn not_get_or_no_range_is_full() {
        let req = headers(&[("range", "bytes=0-0")]);
        assert_eq!(
            parse_range(&Method::HEAD, &req, &HeaderMap::new(), LEN),
            RangeAnswer::Full
        );
        assert_eq!(
            parse_range(&Method::GET, &HeaderMap::new(), &HeaderMap::new(), LEN),
            RangeAnswer::Full
        );
    }

    #[test]
    fn if_range_etag_strong_match_only() {
        // RFC 9110 §13.1.5
        let stored = headers(&[("etag", "\"v1\"")]);
        let check = |if_range: &'static str| {
            let req = headers(&[("range", "bytes=0-0"), ("if-range", if_range)]);
            parse_range(&Method::GET, &req, &stored, LEN)
        };
        assert_eq!(check("\"v1\""), one(0..1));
        assert_eq!(check("\"v2\""), RangeAnswer::Full, "mismatch");
        assert_eq!(check("W/\"v1\""), RangeAnswer::Full, "weak never matches");
    }

    #[test]
    fn if_range_date_must_equal_strong_last_modified() {
        // RFC 9110 §13.1.5, §8.8.2.2
        const LM: &str = "Tue, 14 Nov 2023 22:13:20 GMT";
        let stored = headers(&[
            ("last-modified", LM),
            ("date", "Tue, 14 Nov 2023 23:00:00 GMT"),
        ]);
        let req = |d: &'static str| headers(&[("range", "bytes=0-0"), ("if-range", d)]);
        assert_eq!(parse_range(&Method::GET, &req(LM), &stored, LEN), one(0..1));
        let later = "Tue, 14 Nov 2023 22:13:21 GMT";
        assert_eq!(
            parse_range(&Method::GET, &req(later), &stored, LEN),
            RangeAnswer::Full
        );
        let weak = headers(&[("last-modified", LM), ("date", LM)]);
        assert_eq!(
            parse_range(&Method::GET, &req(LM), &weak, LEN),
            RangeAnswer::Full
        );
    }

    #[test]
    fn single_part_content_range() {
        // RFC 9110 §14.4
        assert_eq!(content_range(&(0..1), LEN), "bytes 0-0/10");
        assert_eq!(content_range(&(5..10), LEN), "bytes 5-9/10");
    }

    #[test]
    fn empty_representation() {
        // RFC 9110 §14.1.3
        let req = headers(&[("range", "bytes=0-")]);
        assert_eq!(
            parse_range(&Method::GET, &req, &HeaderMap::new(), 0),
            RangeAnswer::Unsatisfiable
        );
        let suffix = headers(&[("range", "bytes=-5")]);
        assert_eq!(
            parse_range(&Method::GET, &suffix, &HeaderMap::new(), 0),
            RangeAnswer::Full
        );
    }

    /// Builds the body the way a caller streams it.
    fn assemble(mp: &Multipart, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (head, range) in mp.parts() {
            out.extend_from_slice(head);
            out.extend_from_slice(&body[range.start as usize..range.end as usize]);
        }
        out.extend_from_slice(mp.closing());
        out
    }

    #[test]
    fn multipart_total_length_matches_parts() {
        // RFC 9110 §14.6
        let body: Vec<u8> = (b'a'..=b'z').collect();
        let ct = HeaderValue::from_static("text/plain");
        let ranges = [0..3, 10..11, 20..26];
        let mp = Multipart::new(&ranges, body.len() as u64, Some(&ct), "CAPSTAN_b0undary").unwrap();
        let produced = assemble(&mp, &body);
        assert_eq!(produced.len() as u64, mp.body_len());
        let text = String::from_utf8(produced).unwrap();
        assert!(text.starts_with("--CAPSTAN_b0undary\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-2/26\r\n\r\nabc\r\n--"));
        assert!(text
            .contains("Content-Range: bytes 20-25/26\r\n\r\nuvwxyz\r\n--CAPSTAN_b0undary--\r\n"));
        assert_eq!(text.matches("--CAPSTAN_b0undary\r\n").count(), 3);
        assert_eq!(
            mp.content_type(),
            "multipart/byteranges; boundary=CAPSTAN_b0undary"
        );
    }

    /// One range framed without a part Content-Type.
    fn frame(
        range: Range<u64>,
        full_len: u64,
        boundary: &str,
    ) -> Result<Multipart, MultipartError> {
        Multipart::new(std::slice::from_ref(&range), full_len, None, boundary)
    }

    #[test]
    fn multipart_rejects_bad_input() {
        assert_eq!(frame(0..1, 5, "").unwrap_err(), MultipartError::Boundary);
        assert_eq!(
            frame(0..1, 5, "a\r\nb").unwrap_err(),
            MultipartError::Boundary
        );
        assert_eq!(frame(0..9, 5, "b").unwrap_err(), MultipartError::Range);
        assert_eq!(
            Multipart::new(&[], 5, None, "b").unwrap_err(),
            MultipartError::Range
        );
        let spaced = frame(1..2, 5, "a b:c").unwrap();
        assert_eq!(
            spaced.content_type(),
            "multipart/byteranges; boundary=\"a b:c\""
        );
        let mp = frame(1..2, 5, "b").unwrap();
        assert_eq!(assemble(&mp, b"hello").len() as u64, mp.body_len());
    }
}
