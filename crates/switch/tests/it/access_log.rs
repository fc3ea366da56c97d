//! The access log over real sockets: Combined lines the bench's CLF parser reads back, JSON
//! lines with timings and decisions, sampling, and drops counted instead of waiting.

use crate::common;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

fn log_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-access-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn lines_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// The file's lines, once it has `n` (the writer flushes every 20 ms).
async fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    let what = format!("{n} lines in {}", path.display());
    wait_until(&what, || lines_of(path).len() >= n).await;
    lines_of(path)
}

#[tokio::test]
async fn combined_lines_are_read_back_by_the_replay_parser() {
    let a = Backend::start("a").await;
    let path = log_path("combined.log");
    let extra = format!("[access_log]\npath = {:?}\nformat = \"combined\"\n", path);
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    let ans = get(addr, "/big?bytes=1000").await;
    assert_eq!(ans.status, StatusCode::OK);
    let req = Request::get("/a%20b?x=%221%22")
        .header("user-agent", "agent \"quoted\"")
        .header("referer", "http://r.example/");
    assert_eq!(send(addr, req, Bytes::new()).await.status, StatusCode::OK);
    let upload = Request::post("/upload");
    assert_eq!(
        send(addr, upload, Bytes::from_static(b"12345"))
            .await
            .status,
        StatusCode::OK
    );
    let lines = wait_for_lines(&path, 3).await;
    let log = capstan_workload::parse_clf(&lines.join("\n")).expect("the bench reads the log");
    assert_eq!(log.entries.len(), 3, "{lines:?}");
    let first = &log.entries[0];
    assert_eq!(
        (
            first.host.as_str(),
            first.method.as_str(),
            first.path.as_str()
        ),
        ("127.0.0.1", "GET", "/big?bytes=1000")
    );
    assert_eq!((first.status, first.bytes), (200, 1000));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - first.time).abs() < 60, "logged at {}", first.time);
    assert!(
        lines[1].ends_with("\"http://r.example/\" \"agent \\\"quoted\\\"\""),
        "{}",
        lines[1]
    );
    assert_eq!(log.entries[2].method, "POST");
}

#[tokio::test]
async fn json_lines_carry_timings_class_decision_node_and_cache_status() {
    let a = Backend::start("a").await;
    let path = log_path("json.log");
    let extra = format!(
        "[access_log]\npath = {:?}\nformat = \"json\"\n[cache]\nmemory = \"64MiB\"\n",
        path
    );
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    assert_eq!(get(addr, "/slow?ms=30").await.status, StatusCode::OK);
    let lines = wait_for_lines(&path, 1).await;
    let line: serde_json::Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["target"], "/slow?ms=30");
    assert_eq!(line["status"], 200);
    assert_eq!(line["bytes"], 1);
    assert_eq!(line["client"], "127.0.0.1");
    assert_eq!(line["class"], "static");
    assert_eq!(line["node"], "a");
    assert_eq!(line["decision"], "forward");
    assert_eq!(line["completed"], true);
    assert!(
        line["cache"].as_str().unwrap().starts_with("capstan"),
        "{line}"
    );
    let ms = &line["ms"];
    let at = |k: &str| {
        ms[k]
            .as_f64()
            .unwrap_or_else(|| panic!("ms.{k} missing: {line}"))
    };
    assert!(at("since_accept") >= 0.0);
    assert!(at("dispatch") <= at("sent"), "{line}");
    assert!(at("sent") <= at("first_byte"), "{line}");
    assert!(at("first_byte") >= 30.0, "the node took 30 ms: {line}");
    assert!(at("first_byte") <= at("end"), "{line}");
    assert!(
        at("connect") <= at("first_byte"),
        "a new connection: {line}"
    );
    assert!(line["time"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn switch_answers_say_why() {
    let a = Backend::start("a").await;
    let path = log_path("refusals.log");
    let extra = format!(
        "[access_log]\npath = {:?}\nformat = \"json\"\n[limits]\nmax_request_line = 64\n",
        path
    );
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    let long = format!("/{}", "x".repeat(100));
    assert_eq!(get(addr, &long).await.status, StatusCode::URI_TOO_LONG);
    let connect = raw_exchange(
        addr,
        b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n",
    )
    .await;
    assert!(connect.starts_with("HTTP/1.1 405"), "{connect}");
    let lines = wait_for_lines(&path, 2).await;
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        (first["status"].as_u64(), first["decision"].as_str()),
        (Some(414), Some("switch"))
    );
    assert!(first["node"].is_null());
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second["target"], "example.org:443");
    assert_eq!(second["decision"], "refused");
}

#[tokio::test]
async fn sampling_logs_one_request_in_n() {
    let a = Backend::start("a").await;
    let path = log_path("sampled.log");
    let extra = format!("[access_log]\npath = {:?}\nsample = 3\n", path);
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    for i in 0..9 {
        assert_eq!(get(addr, &format!("/{i}")).await.status, StatusCode::OK);
    }
    let admin = sw.admin_addr.unwrap();
    wait_for_metrics(admin, "3 lines written", |m| {
        metric(m, "capstan_access_log_written_total") >= 3.0
    })
    .await;
    let lines = wait_for_lines(&path, 3).await;
    assert_eq!(lines.len(), 3, "{lines:?}");
    let paths: Vec<&str> = lines.iter().map(|l| l.split('"').nth(1).unwrap()).collect();
    assert_eq!(
        paths,
        ["GET /0 HTTP/1.1", "GET /3 HTTP/1.1", "GET /6 HTTP/1.1"]
    );
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A writer that cannot keep up never makes a request wait: what does not fit in the buffer
/// is dropped and counted, and every request is either written or counted.
#[tokio::test]
async fn a_full_buffer_drops_and_counts() {
    let a = Backend::start("a").await;
    let path = log_path("tiny-buffer.log");
    let extra = format!(
        "[access_log]\npath = {:?}\nbuffer = 1\n[admission]\nlimit = \"off\"\n",
        path
    );
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    let admin = sw.admin_addr.unwrap();
    let requests = 200;
    let mut tasks = Vec::new();
    for i in 0..requests {
        tasks.push(tokio::spawn(async move {
            get(addr, &format!("/{i}")).await.status
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    let what = format!("written + dropped = {requests}, every written line in the file");
    wait_for_metrics(admin, &what, |metrics| {
        let written = metric(metrics, "capstan_access_log_written_total");
        let dropped = metric(metrics, "capstan_access_log_dropped_total");
        // Lines reach the file when the writer flushes its batch.
        written + dropped == f64::from(requests) && lines_of(&path).len() as f64 == written
    })
    .await;
}

#[tokio::test]
async fn bad_settings_are_one_line_errors() {
    for (extra, says) in [
        ("[access_log]\nsample = 0\n", "access_log.sample"),
        ("[access_log]\nformat = \"xml\"\n", "unknown variant"),
        ("[access_log]\nbuffer = 0\n", "access_log.buffer"),
        ("[access_log]\nrotate = true\n", "unknown field"),
    ] {
        let text =
            format!("listen = [\"127.0.0.1:0\"]\n{extra}[[node]]\naddress = \"127.0.0.1:1\"\n");
        let err = capstan_switch::Config::parse(&text, Some("t.toml")).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains(says), "{extra}: {shown}");
        assert!(!shown.contains('\n'), "{shown}");
    }
    let text = "listen = [\"127.0.0.1:0\"]\n[access_log]\npath = \"/nonexistent-dir/x.log\"\n\
                [[node]]\naddress = \"127.0.0.1:1\"\n";
    let config = capstan_switch::Config::parse(text, None).unwrap();
    let err = capstan_switch::start(config).await.err().unwrap();
    assert!(
        err.to_string()
            .contains("access_log.path: cannot open /nonexistent-dir/x.log"),
        "{err}"
    );
}

/// A line reaches the file while the switch keeps running and serves nothing else: the writer
/// takes a worker's buffer that is far from full within its flush interval.
#[tokio::test]
async fn a_lone_request_is_written_without_more_traffic_or_shutdown() {
    let a = Backend::start("a").await;
    let path = log_path("lone.log");
    let extra = format!("[access_log]\npath = {:?}\n", path);
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    assert_eq!(
        get(sw.listen_addrs[0], "/lone").await.status,
        StatusCode::OK
    );
    let lines = wait_for_lines(&path, 1).await;
    assert!(lines[0].contains("\"GET /lone HTTP/1.1\" 200"), "{lines:?}");
    let log = sw.switch.access_log.as_ref().unwrap();
    assert_eq!((log.written(), log.handed_over()), (1, 0));
}

/// Requests served on several threads of a multi-thread runtime (each thread formats into its
/// own buffer): every line arrives, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn lines_from_every_worker_thread_arrive() {
    let a = Backend::start("a").await;
    let path = log_path("threads.log");
    let extra = format!(
        "[access_log]\npath = {:?}\n[admission]\nlimit = \"off\"\n",
        path
    );
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    let tasks: Vec<_> = (0..8)
        .map(|client| {
            tokio::spawn(async move {
                for i in 0..40 {
                    let ans = get(addr, &format!("/{client}/{i}")).await;
                    assert_eq!(ans.status, StatusCode::OK);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut paths: Vec<String> = wait_for_lines(&path, 320)
        .await
        .iter()
        .map(|l| l.split(' ').nth(6).unwrap().to_string())
        .collect();
    paths.sort();
    let mut expected: Vec<String> = (0..8)
        .flat_map(|c| (0..40).map(move |i| format!("/{c}/{i}")))
        .collect();
    expected.sort();
    assert_eq!(paths, expected);
    assert_eq!(sw.switch.access_log.as_ref().unwrap().dropped(), 0);
}

/// What a client puts in its request line and user agent cannot break a JSON line: quotes,
/// backslashes, a tab and bytes that are not UTF-8 come back as they were sent (the latter as
/// U+FFFD).
#[tokio::test]
async fn json_lines_escape_what_the_client_sent() {
    let a = Backend::start("a").await;
    let path = log_path("escapes.log");
    let extra = format!("[access_log]\npath = {:?}\nformat = \"json\"\n", path);
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let answer = raw_exchange(
        sw.listen_addrs[0],
        b"GET /q?a={b}|c^`d HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\
          User-Agent: say \"hi\" \\o/\tbye \xE9\r\nReferer: \"\\\\\"\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let lines = wait_for_lines(&path, 1).await;
    let line: serde_json::Value = serde_json::from_str(&lines[0]).expect("a JSON line");
    assert_eq!(line["target"], "/q?a={b}|c^`d");
    assert_eq!(line["user_agent"], "say \"hi\" \\o/\tbye \u{FFFD}");
    assert_eq!(line["referer"], "\"\\\\\"");
}

/// A thread reuses finished requests' notes: nothing of one request (node, class, timings)
/// shows in the line of the next.
#[tokio::test]
async fn a_line_says_nothing_of_the_request_before() {
    let a = Backend::start("a").await;
    let path = log_path("reused.log");
    let extra = format!(
        "[access_log]\npath = {:?}\nformat = \"json\"\n[limits]\nmax_request_line = 64\n",
        path
    );
    let sw = start_switch(&config_for(&[&a], &extra)).await;
    let addr = sw.listen_addrs[0];
    for _ in 0..3 {
        assert_eq!(get(addr, "/fine").await.status, StatusCode::OK);
        let long = format!("/{}", "x".repeat(100));
        assert_eq!(get(addr, &long).await.status, StatusCode::URI_TOO_LONG);
    }
    let lines = wait_for_lines(&path, 6).await;
    for (i, line) in lines.iter().enumerate() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        if i % 2 == 0 {
            assert_eq!(
                (&line["node"], &line["decision"]),
                (&"a".into(), &"forward".into())
            );
            assert!(line["ms"]["first_byte"].is_number(), "{line}");
        } else {
            assert_eq!(line["status"], 414);
            assert_eq!(line["decision"], "switch", "{line}");
            for key in ["node", "class"] {
                assert!(line[key].is_null(), "{key}: {line}");
            }
            for key in ["dispatch", "sent", "first_byte", "connect"] {
                assert!(line["ms"][key].is_null(), "ms.{key}: {line}");
            }
        }
    }
}

/// An HTTP/2 client that resets its stream before the answer began gets a line with nginx's
/// 499 (client closed request), and the connection's next stream is logged as usual.
#[tokio::test]
async fn a_request_its_client_abandoned_is_logged_499() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let a = Backend::start("a").await;
    let path = log_path("abandoned.log");
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [access_log]\npath = {path:?}\nformat = \"combined\"\n\
         [[listener]]\naddress = \"127.0.0.1:0\"\nh2c = true\n\
         [[node]]\nname = \"a\"\naddress = \"{}\"\n",
        a.addr
    );
    let sw = start_switch(&text).await;
    let (admin, h2c) = (sw.admin_addr.unwrap(), sw.listen_addrs[1]);
    let tcp = tokio::net::TcpStream::connect(h2c).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = |path: &str| {
        hyper::Request::get(format!("http://x{path}"))
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap()
    };
    let waiting = tokio::spawn(sender.send_request(get("/slow?ms=30000")));
    wait_for_status(admin, "the slow request at the node", |s| {
        node_status(s, "a")["active"] == 1
    })
    .await;
    // Dropping the response future resets the stream (CANCEL).
    waiting.abort();
    let lines = wait_for_lines(&path, 1).await;
    assert!(
        lines[0].contains("\"GET /slow?ms=30000 HTTP/2.0\" 499 -"),
        "{lines:?}"
    );
    let resp = sender.send_request(get("/fine")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let lines = wait_for_lines(&path, 2).await;
    assert!(
        lines[1].contains("\"GET /fine HTTP/2.0\" 200 "),
        "{lines:?}"
    );
}
