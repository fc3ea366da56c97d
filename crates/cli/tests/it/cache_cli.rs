//! The cache as a user runs it: `capstan check` on `[cache]` sections, the example
//! configuration serving hits, the disk tier across a restart, and `capstan bench` counting
//! Capstan's hits.

use crate::support;

use std::path::PathBuf;

use support::*;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `capstan serve` on a configuration written to `dir` (its `listen` replaced by a free port).
fn serve_config(dir: &std::path::Path, text: &str) -> (Proc, std::net::SocketAddr) {
    let config = dir.join("serve.toml");
    std::fs::write(&config, text).unwrap();
    let listen = free_addr();
    let l = listen.to_string();
    let args = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        &l,
    ];
    (spawn(&args, listen), listen)
}

#[test]
fn check_rejects_bad_cache_sections_with_file_line_and_column() {
    let dir = temp_dir("check");
    let head = "listen = [\"127.0.0.1:8080\"]\n[[node]]\naddress = \"127.0.0.1:9001\"\n[cache]\n";
    let cases = [
        ("memory = \"12 parsecs\"\n", "5:10:", "unit"),
        ("policy = \"fifo\"\n", "5:10:", "fifo"),
        (
            "memory = \"2MiB\"\nmax_object = \"8MiB\"\n",
            "6:14:",
            "max_object",
        ),
        ("classes = [\"gold\"]\n", "5:11:", "gold"),
        ("heuristic_fraction = 2.0\n", "5:22:", "heuristic_fraction"),
        ("purge_from = [\"10.0.0.0/40\"]\n", "5:14:", "prefix"),
        ("colour = \"blue\"\n", "5:1:", "colour"),
        ("grace = \"soon\"\n", "5:9:", "duration"),
        (
            "targeted_fields = [\"CDN-Cache-Control\", \"Expires\"]\n",
            "5:19:",
            "\"Expires\" is not a targeted cache-control field name",
        ),
    ];
    for (i, (body, location, says)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, format!("{head}{body}")).unwrap();
        let out = run(&["check", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{body}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        let want = format!("capstan: {}:{location}", path.display());
        assert!(
            stderr.starts_with(&want),
            "want {want} in `{stderr}` for {body}"
        );
        assert!(stderr.contains(says), "`{stderr}` should name {says}");
    }
    let out = run(&[
        "check",
        repo_root().join("examples/cache.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let described = String::from_utf8(out.stdout).unwrap();
    assert!(described.contains("cache     memory 256MiB"), "{described}");
    assert!(!described.contains("stale answers"), "{described}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 31: serving stale is off by default; an operator who turns grace or stale_if_error on
/// is told, by `capstan check`, that the cache may then answer stale beyond RFC 9111 and how
/// long; the targeted fields it obeys are listed.
#[test]
fn check_says_when_the_cache_may_serve_stale_beyond_rfc_9111() {
    let dir = temp_dir("check-stale");
    let head = "listen = [\"127.0.0.1:8080\"]\n[[node]]\naddress = \"127.0.0.1:9001\"\n[cache]\n";
    let describe = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{head}{body}")).unwrap();
        let out = run(&["check", path.to_str().unwrap()]);
        assert!(out.status.success(), "{body}");
        String::from_utf8(out.stdout).unwrap()
    };
    let default = describe("default.toml", "");
    assert!(default.contains(", grace 0s, "), "{default}");
    assert!(
        default.contains("\n          targeted fields: CDN-Cache-Control\n"),
        "{default}"
    );
    assert!(!default.contains("stale answers"), "{default}");
    let on = describe(
        "on.toml",
        "grace = \"30s\"\nstale_if_error = \"5m\"\n\
         targeted_fields = [\"Capstan-Cache-Control\", \"CDN-Cache-Control\"]\n",
    );
    assert!(
        on.contains("targeted fields: Capstan-Cache-Control, CDN-Cache-Control\n"),
        "{on}"
    );
    assert!(
        on.contains(
            "\n          may serve stale answers beyond RFC 9111 §4.2.4, that neither the response \
             nor the request allowed: for 30s while refreshing (grace), for 5m when the node \
             fails (stale_if_error)\n"
        ),
        "{on}"
    );
    let off = describe(
        "off.toml",
        "targeted_fields = []\nstale_if_error = \"1m\"\n",
    );
    assert!(
        off.contains("targeted fields: none (Cache-Control only)"),
        "{off}"
    );
    assert!(
        off.contains("allowed: for 1m when the node fails (stale_if_error)\n"),
        "{off}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `capstan serve --config examples/cache.toml`, then the same URL twice: the second answer
/// is the cache's.
#[test]
fn the_example_cache_config_answers_the_second_request_itself() {
    let (_node, node_addr) = origin(&[]);
    let (listen, admin) = (free_addr(), free_addr());
    let config = repo_root().join("examples/cache.toml");
    let (l, a, n) = (listen.to_string(), admin.to_string(), node_addr.to_string());
    let _switch = spawn(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            &l,
            "--admin",
            &a,
            "--node",
            &n,
        ],
        listen,
    );
    let first = get(listen, "/file5k.html");
    assert_eq!(first.status, 200);
    let status = first.header("cache-status").unwrap_or_default();
    assert!(
        status.contains("fwd=uri-miss") && status.contains("stored"),
        "{status}"
    );
    let second = get(listen, "/file5k.html");
    let status = second.header("cache-status").unwrap_or_default();
    assert!(status.starts_with("capstan; hit"), "{status}");
    assert_eq!(second.body, first.body);
    let report = get(admin, "/status").text();
    assert!(report.contains("\"hits\": 1"), "{report}");
}

/// The disk tier keeps what it stored across a restart of the switch.
#[test]
fn the_disk_tier_serves_a_hit_after_a_restart() {
    let (_node, node_addr) = origin(&[]);
    let dir = temp_dir("disk");
    let store = dir.join("store");
    let config = dir.join("disk.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:1\"]\n[[node]]\naddress = \"{node_addr}\"\n\
             [cache]\nmemory = \"8MiB\"\ndisk_path = \"{}\"\ndisk_size = \"64MiB\"\n",
            store.display()
        ),
    )
    .unwrap();
    let listen = free_addr();
    let l = listen.to_string();
    let args = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        &l,
    ];
    let mut first = spawn(&args, listen);
    let fetched = get(listen, "/file5k.html");
    assert_eq!(fetched.status, 200);
    let object_files = || {
        walk(&store)
            .iter()
            .filter(|p| p.file_name().is_some_and(|n| n.len() == 16))
            .count()
    };
    eventually("the object written to disk", || object_files() == 1);
    first.signal("TERM");
    assert!(first
        .wait_exit(std::time::Duration::from_secs(10))
        .is_some());
    let _second = spawn(&args, listen);
    let again = get(listen, "/file5k.html");
    let status = again.header("cache-status").unwrap_or_default();
    assert!(
        status.starts_with("capstan; hit"),
        "after a restart: {status}"
    );
    assert_eq!(again.body, fetched.body);
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `capstan bench` reads Capstan's `Cache-Status` and reports the document and byte hit ratios.
#[test]
fn bench_counts_the_switchs_hits() {
    let (_node, node_addr) = origin(&[]);
    let dir = temp_dir("bench");
    let (_switch, listen) = serve_config(
        &dir,
        &format!("listen = [\"127.0.0.1:1\"]\n[[node]]\naddress = \"{node_addr}\"\n[cache]\n"),
    );
    let json = dir.join("b.json");
    let url = format!("http://{listen}/file500.html");
    // Stored before the run: otherwise every request that arrives while the first one's fill
    // runs is collapsed into it (a miss), as many as a busy machine slows that fill down.
    assert_eq!(get(listen, "/file500.html").status, 200);
    let out = run(&[
        "bench",
        &url,
        "--rate",
        "200",
        "--duration",
        "1s",
        "--json",
        json.to_str().unwrap(),
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cache = &result["cache"];
    let dhr = cache["doc_hit_ratio"].as_f64().unwrap_or(0.0);
    let bhr = cache["byte_hit_ratio"].as_f64().unwrap_or(0.0);
    assert!(dhr > 0.9, "every request hit the stored copy: {result}");
    assert!(bhr > 0.9, "{result}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cachable 1 GiB response, over `max_object`, streams to two clients at once through the
/// cache layer while the switch's peak memory stays small (it is neither stored nor buffered).
#[test]
fn a_gigabyte_passes_through_the_cache_in_bounded_memory() {
    const TOTAL: u64 = 1 << 30;
    let backend_addr = big_body_backend(TOTAL, "Cache-Control: max-age=60\r\n");
    let dir = temp_dir("gigabyte");
    let (switch, listen) = serve_config(
        &dir,
        &format!(
            "listen = [\"127.0.0.1:1\"]\n[[node]]\naddress = \"{backend_addr}\"\n\
             [cache]\nmemory = \"64MiB\"\nmax_object = \"8MiB\"\n"
        ),
    );
    let download = move || download_size(listen, "/big");
    let clients: Vec<_> = (0..2).map(|_| std::thread::spawn(download)).collect();
    for c in clients {
        let received = c.join().unwrap();
        assert!(
            received > TOTAL,
            "head and all {TOTAL} body bytes: {received}"
        );
    }
    let peak_kb = peak_rss_kb(switch.pid());
    assert!(
        peak_kb < 64 * 1024,
        "peak resident memory {peak_kb} KiB for two 1 GiB bodies"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
