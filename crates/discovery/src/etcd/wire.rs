//! etcd's v3 JSON gateway on the wire: the request bodies this crate sends and the answers it
//! reads, as plain data. No I/O here (that is `gateway`), so every malformed answer can be
//! tested without a server.
//!
//! The gateway writes protobuf messages as JSON (proto3's mapping): bytes (keys, values,
//! range ends) in standard base64 with padding, int64 fields as decimal strings, enums by
//! name, and a field at its zero value (0, false, "", PUT) left out. So an absent field is
//! read as zero, except where etcd always sends one (a header; a key): its absence is a
//! malformed answer. Numbers are accepted as strings or as JSON numbers.
//!
//! Every decoder takes one answer as a [`serde_json::Value`] (already unwrapped from a
//! stream's `{"result":…}`) and returns the data or, as a `String`, what is wrong with it.
//! Nothing here panics on bad input.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

/// Bytes as the gateway wants them.
fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// The end of the key range that holds exactly the keys starting with `prefix`: the prefix
/// with its last byte below 0xff raised by one (what etcd's clients call the prefix's range
/// end). A prefix of 0xff bytes only (or none) ends nowhere: `\0`, every key after it.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// `POST /v3/kv/range` of every key under `prefix` (`count_only`: just the header and count).
pub(super) fn range_prefix(prefix: &str, count_only: bool) -> Value {
    let mut body = json!({
        "key": b64(prefix.as_bytes()),
        "range_end": b64(&prefix_end(prefix.as_bytes())),
    });
    if count_only {
        body["count_only"] = Value::Bool(true);
    }
    body
}

/// `POST /v3/kv/range` of one key.
pub(super) fn range_key(key: &str) -> Value {
    json!({ "key": b64(key.as_bytes()) })
}

/// `POST /v3/kv/put` of `key` = `value`, bound to `lease` (0: none).
pub(super) fn put(key: &str, value: &[u8], lease: i64) -> Value {
    json!({ "key": b64(key.as_bytes()), "value": b64(value), "lease": lease.to_string() })
}

/// `POST /v3/kv/deleterange` of one key.
pub(super) fn delete(key: &str) -> Value {
    json!({ "key": b64(key.as_bytes()) })
}

/// `POST /v3/watch`: every key under `prefix` from revision `from`, with progress
/// notifications (see `watch` for what they are for).
pub(super) fn watch_prefix(prefix: &str, from: i64) -> Value {
    json!({ "create_request": {
        "key": b64(prefix.as_bytes()),
        "range_end": b64(&prefix_end(prefix.as_bytes())),
        "start_revision": from.to_string(),
        "progress_notify": true,
    }})
}

/// `POST /v3/lease/grant` of `ttl_s` seconds (etcd picks the id).
pub(super) fn lease_grant(ttl_s: i64) -> Value {
    json!({ "TTL": ttl_s.to_string() })
}

/// `POST /v3/lease/keepalive`, `/v3/lease/revoke` or `/v3/lease/timetolive` of one lease.
pub(super) fn lease(id: i64) -> Value {
    json!({ "ID": id.to_string() })
}

/// One key and its value, as a range or a watch event gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub lease: i64,
}

/// The answer to a range: the store's revision and the keys (none when `count_only`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Range {
    pub revision: i64,
    pub kvs: Vec<KeyValue>,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EventKind {
    Put,
    Delete,
}

/// One change a watch reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
}

/// One watch response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct WatchAnswer {
    /// The header's revision (0 when etcd left it out, as in a cancellation).
    pub revision: i64,
    pub created: bool,
    pub canceled: bool,
    pub cancel_reason: String,
    /// Above 0: the revision asked for is compacted away; history starts after this one.
    pub compact_revision: i64,
    pub events: Vec<Event>,
}

/// A lease as grant, keepalive and time-to-live answer it: its id and seconds left (0 or
/// less: it does not exist any more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lease {
    pub id: i64,
    pub ttl: i64,
}

// The answers as the gateway spells them; turned into the types above by the decoders.

#[derive(Deserialize)]
struct RawHeader {
    #[serde(default, deserialize_with = "int64")]
    revision: i64,
}

#[derive(Deserialize)]
struct RawKeyValue {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default, deserialize_with = "int64")]
    mod_revision: i64,
    #[serde(default, deserialize_with = "int64")]
    lease: i64,
}

#[derive(Deserialize)]
struct RawRange {
    header: Option<RawHeader>,
    #[serde(default)]
    kvs: Vec<RawKeyValue>,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    kv: Option<RawKeyValue>,
}

#[derive(Deserialize)]
struct RawWatch {
    header: Option<RawHeader>,
    #[serde(default)]
    created: bool,
    #[serde(default)]
    canceled: bool,
    #[serde(default)]
    cancel_reason: String,
    #[serde(default, deserialize_with = "int64")]
    compact_revision: i64,
    #[serde(default)]
    events: Vec<RawEvent>,
}

#[derive(Deserialize)]
struct RawLease {
    #[serde(default, rename = "ID", deserialize_with = "int64")]
    id: i64,
    #[serde(default, rename = "TTL", deserialize_with = "int64")]
    ttl: i64,
    /// A grant etcd refused says why here.
    #[serde(default)]
    error: String,
}

/// The answer to a range.
pub(super) fn range(answer: Value) -> Result<Range, String> {
    let raw: RawRange = typed(answer)?;
    let revision = header_revision(raw.header)?;
    if revision < 1 {
        return Err("the header has no revision".into());
    }
    let kvs = raw
        .kvs
        .into_iter()
        .enumerate()
        .map(|(i, kv)| key_value(kv).map_err(|e| format!("kvs[{i}]: {e}")))
        .collect::<Result<_, _>>()?;
    Ok(Range { revision, kvs })
}

/// The answer to a put, a delete or a revoke: only that it is one (it has a header).
pub(super) fn header(answer: Value) -> Result<i64, String> {
    #[derive(Deserialize)]
    struct Only {
        header: Option<RawHeader>,
    }
    header_revision(typed::<Only>(answer)?.header)
}

/// One watch response.
pub(super) fn watch(answer: Value) -> Result<WatchAnswer, String> {
    let raw: RawWatch = typed(answer)?;
    let revision = header_revision(raw.header)?;
    let events = raw
        .events
        .into_iter()
        .enumerate()
        .map(|(i, e)| event(e).map_err(|e| format!("events[{i}]: {e}")))
        .collect::<Result<_, _>>()?;
    Ok(WatchAnswer {
        revision,
        created: raw.created,
        canceled: raw.canceled,
        cancel_reason: raw.cancel_reason,
        compact_revision: raw.compact_revision,
        events,
    })
}

/// The answer to a lease grant, keepalive or time-to-live.
pub(super) fn lease_answer(answer: Value) -> Result<Lease, String> {
    let raw: RawLease = typed(answer)?;
    if !raw.error.is_empty() {
        return Err(format!("etcd says: {}", raw.error));
    }
    Ok(Lease {
        id: raw.id,
        ttl: raw.ttl,
    })
}

/// An error etcd answers with, in words: the unary form
/// (`{"error":"…","message":"…","code":5}`) or a stream's (`{"error":{"grpc_code":14,
/// "http_code":503,"message":"…"}}`); the gRPC code when it has one. `None` if `answer`
/// has no error.
pub(super) fn error_of(answer: &Value) -> Option<(String, Option<i64>)> {
    let error = answer.get("error")?;
    let (message, code) = match error {
        Value::Object(inner) => (inner.get("message"), inner.get("grpc_code")),
        _ => (answer.get("message").or(Some(error)), answer.get("code")),
    };
    let message = match message {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        None | Some(Value::Null | Value::String(_)) => "(no message)".to_string(),
        Some(other) => other.to_string(),
    };
    Some((message, code.and_then(Value::as_i64)))
}

fn typed<T: for<'de> Deserialize<'de>>(answer: Value) -> Result<T, String> {
    if !answer.is_object() {
        return Err(format!("expected a JSON object, got {}", shorten(&answer)));
    }
    serde_json::from_value(answer).map_err(|e| e.to_string())
}

fn header_revision(header: Option<RawHeader>) -> Result<i64, String> {
    match header {
        Some(h) if h.revision >= 0 => Ok(h.revision),
        Some(h) => Err(format!("the header's revision {} is negative", h.revision)),
        None => Err("no header".into()),
    }
}

fn key_value(raw: RawKeyValue) -> Result<KeyValue, String> {
    let key = unbase64("key", &raw.key)?;
    if key.is_empty() {
        return Err("no key".into());
    }
    Ok(KeyValue {
        key,
        value: unbase64("value", &raw.value)?,
        mod_revision: raw.mod_revision,
        lease: raw.lease,
    })
}

fn event(raw: RawEvent) -> Result<Event, String> {
    let kind = match &raw.kind {
        None => EventKind::Put,
        Some(Value::String(s)) if s == "PUT" => EventKind::Put,
        Some(Value::String(s)) if s == "DELETE" => EventKind::Delete,
        Some(Value::Number(n)) if n.as_u64() == Some(0) => EventKind::Put,
        Some(Value::Number(n)) if n.as_u64() == Some(1) => EventKind::Delete,
        Some(other) => return Err(format!("unknown event type {other}")),
    };
    let kv = key_value(raw.kv.ok_or("an event without kv")?).map_err(|e| format!("kv: {e}"))?;
    Ok(Event { kind, kv })
}

fn unbase64(what: &str, text: &str) -> Result<Vec<u8>, String> {
    STANDARD
        .decode(text)
        .map_err(|e| format!("{what} is not base64 ({e}): `{}`", shorten_str(text)))
}

/// An int64 as the gateway writes it (a string) or as a JSON number.
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    struct Int64;
    impl Visitor<'_> for Int64 {
        type Value = i64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer (as a string or a number)")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("{v} is out of range")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
            v.parse()
                .map_err(|_| E::custom(format!("`{}` is not an integer", shorten_str(v))))
        }
    }
    d.deserialize_any(Int64)
}

fn shorten(value: &Value) -> String {
    shorten_str(&value.to_string())
}

/// Text quoted in a message, cut to a readable length.
pub(super) fn shorten_str(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn requests_carry_base64_keys_and_string_numbers() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
        let body = range_prefix("/capstan/", false);
        assert_eq!(body["key"], "L2NhcHN0YW4v");
        assert_eq!(body["range_end"], "L2NhcHN0YW4w");
        assert!(body.get("count_only").is_none());
        assert_eq!(range_prefix("/c/", true)["count_only"], true);
        let put = put("/k", b"v", 7);
        assert_eq!(
            (&put["key"], &put["value"], &put["lease"]),
            (&json!("L2s="), &json!("dg=="), &json!("7"))
        );
        let watch = watch_prefix("/c/", 12);
        assert_eq!(watch["create_request"]["start_revision"], "12");
        assert_eq!(watch["create_request"]["progress_notify"], true);
        assert_eq!(lease_grant(5)["TTL"], "5");
        assert_eq!(lease(-3)["ID"], "-3");
    }

    #[test]
    fn a_range_answer_is_read() {
        let answer = parse(
            r#"{"header":{"cluster_id":"1","revision":"9"},"kvs":[
                {"key":"L2EvMQ==","create_revision":"2","mod_revision":"8","version":"1",
                 "value":"aGVsbG8=","lease":"694d5"}],"count":"1"}"#,
        );
        // A lease id that is not a number is malformed.
        assert!(range(answer)
            .unwrap_err()
            .contains("`694d5` is not an integer"));
        let answer = parse(
            r#"{"header":{"revision":"9"},"kvs":[{"key":"L2EvMQ==","mod_revision":8,
                "value":"aGVsbG8=","lease":"7"},{"key":"L2EvMg=="}],"count":"2"}"#,
        );
        let got = range(answer).unwrap();
        assert_eq!(got.revision, 9);
        assert_eq!(got.kvs.len(), 2);
        assert_eq!(got.kvs[0].key, b"/a/1");
        assert_eq!(got.kvs[0].value, b"hello");
        assert_eq!((got.kvs[0].mod_revision, got.kvs[0].lease), (8, 7));
        // Empty value and no lease: left out by the gateway, read as empty and 0.
        assert_eq!(got.kvs[1].value, b"");
        assert_eq!(got.kvs[1].lease, 0);
        // No keys at all: `kvs` left out.
        let none = range(parse(r#"{"header":{"revision":"3"}}"#)).unwrap();
        assert_eq!((none.revision, none.kvs.len()), (3, 0));
    }

    #[test]
    fn malformed_range_answers_say_what_is_wrong() {
        let bad = |text: &str| range(parse(text)).unwrap_err();
        assert_eq!(bad(r#"{"kvs":[]}"#), "no header");
        assert_eq!(bad(r#"{"header":{}}"#), "the header has no revision");
        assert!(bad(r#"{"header":{"revision":"x"}}"#).contains("`x` is not an integer"));
        assert!(bad(r#"{"header":{"revision":true}}"#).contains("an integer"));
        assert!(bad(r#"{"header":{"revision":"-2"}}"#).contains("negative"));
        assert!(bad(r#"{"header":{"revision":18446744073709551615}}"#).contains("out of range"));
        let e = bad(r#"{"header":{"revision":"2"},"kvs":[{"key":"!!","value":""}]}"#);
        assert!(e.starts_with("kvs[0]: key is not base64 ("), "{e}");
        assert!(e.ends_with("`!!`"), "{e}");
        let e = bad(r#"{"header":{"revision":"2"},"kvs":[{"key":"L2E=","value":"aGVsbG8"}]}"#);
        assert!(e.starts_with("kvs[0]: value is not base64"), "{e}");
        assert_eq!(
            bad(r#"{"header":{"revision":"2"},"kvs":[{"value":"YQ=="}]}"#),
            "kvs[0]: no key"
        );
        assert!(bad(r#"{"header":{"revision":"2"},"kvs":{}}"#).contains("expected a sequence"));
        assert!(
            bad(r#"{"header":{"revision":"2"},"kvs":[{"key":5}]}"#).contains("expected a string")
        );
        assert!(bad("[1,2]").starts_with("expected a JSON object, got [1,2]"));
        assert!(bad(&format!("\"{}\"", "x".repeat(200))).contains('…'));
    }

    #[test]
    fn watch_answers_are_read() {
        let created = watch(parse(r#"{"header":{"revision":"5"},"created":true}"#)).unwrap();
        assert!(created.created && created.events.is_empty() && !created.canceled);
        assert_eq!(created.revision, 5);
        let events = watch(parse(
            r#"{"header":{"revision":"7"},"events":[
                {"kv":{"key":"L2EvYg==","mod_revision":"6","value":"djM="}},
                {"type":"DELETE","kv":{"key":"L2EvYw==","mod_revision":"7"}},
                {"type":1,"kv":{"key":"L2EvZA==","mod_revision":"7"}}]}"#,
        ))
        .unwrap();
        let kinds: Vec<EventKind> = events.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Put, EventKind::Delete, EventKind::Delete]
        );
        assert_eq!(events.events[0].kv.value, b"v3");
        assert_eq!(events.events[1].kv.key, b"/a/c");
        let compacted = watch(parse(
            r#"{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"4"}"#,
        ))
        .unwrap();
        assert!(compacted.canceled);
        assert_eq!((compacted.revision, compacted.compact_revision), (0, 4));
        let canceled = watch(parse(
            r#"{"header":{"revision":"3"},"canceled":true,"cancel_reason":"permission denied"}"#,
        ))
        .unwrap();
        assert_eq!(canceled.cancel_reason, "permission denied");
    }

    #[test]
    fn malformed_watch_answers_say_what_is_wrong() {
        let bad = |text: &str| watch(parse(text)).unwrap_err();
        assert_eq!(bad(r#"{"created":true}"#), "no header");
        assert_eq!(
            bad(r#"{"header":{"revision":"7"},"events":[{"type":"PUT"}]}"#),
            "events[0]: an event without kv"
        );
        assert_eq!(
            bad(r#"{"header":{"revision":"7"},"events":[{"type":"MOVE","kv":{"key":"YQ=="}}]}"#),
            "events[0]: unknown event type \"MOVE\""
        );
        let e = bad(r#"{"header":{"revision":"7"},"events":[{"kv":{"key":"YQ==","value":"%"}}]}"#);
        assert!(e.starts_with("events[0]: kv: value is not base64"), "{e}");
        assert!(bad(r#"{"header":{"revision":"7"},"compact_revision":"four"}"#).contains("`four`"));
        assert!(
            bad(r#"{"header":{"revision":"7"},"created":"yes"}"#).contains("expected a boolean")
        );
    }

    #[test]
    fn lease_answers_and_errors_are_read() {
        let granted = lease_answer(parse(
            r#"{"header":{},"ID":"2324035843028120329","TTL":"5"}"#,
        ));
        assert_eq!(
            granted,
            Ok(Lease {
                id: 2324035843028120329,
                ttl: 5
            })
        );
        // A keepalive of a lease that is gone: no TTL (zero, left out).
        assert_eq!(
            lease_answer(parse(r#"{"header":{},"ID":"12345"}"#))
                .unwrap()
                .ttl,
            0
        );
        assert_eq!(
            lease_answer(parse(r#"{"ID":"1","TTL":"-1"}"#)).unwrap().ttl,
            -1
        );
        assert_eq!(
            lease_answer(parse(r#"{"ID":"1","error":"too many leases"}"#)).unwrap_err(),
            "etcd says: too many leases"
        );
        assert!(lease_answer(parse(r#"{"ID":"1x"}"#))
            .unwrap_err()
            .contains("`1x`"));
        assert_eq!(
            header(parse(r#"{"header":{"revision":"4"},"deleted":"1"}"#)),
            Ok(4)
        );
        assert_eq!(header(parse(r#"{"deleted":"1"}"#)), Err("no header".into()));

        let unary = parse(
            r#"{"error":"etcdserver: requested lease not found",
                "message":"etcdserver: requested lease not found","code":5}"#,
        );
        assert_eq!(
            error_of(&unary),
            Some(("etcdserver: requested lease not found".into(), Some(5)))
        );
        let stream = parse(
            r#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader",
                "http_status":"Service Unavailable"}}"#,
        );
        assert_eq!(
            error_of(&stream),
            Some(("etcdserver: no leader".into(), Some(14)))
        );
        assert_eq!(
            error_of(&parse(r#"{"error":""}"#)),
            Some(("(no message)".into(), None))
        );
        assert_eq!(
            error_of(&parse(r#"{"error":{"code":"x"}}"#)).unwrap().1,
            None
        );
        assert_eq!(error_of(&parse(r#"{"result":{}}"#)), None);
    }
}
