//! `capstan lab` with `[workload.secure]`: the secure class through the switch's TLS listener
//! and, with real nodes, over TLS to the nodes too; a short run whose report shows secure
//! requests completed and the handshakes that carried them.

use serde_json::Value;

use crate::support::lab_run;
use lab_run::{capstan, run_lab, temp_dir};

/// Two real nodes with a small tree, four closed-loop clients of which two are secure.
const EXPERIMENT: &str = r#"
name = "secure-tls-test"
title = "secure class over TLS"
figure = "test"

[nodes]
count = 2
tree = "cap"
files = 40
cpu_light_ms = 5
[nodes.origin]
resources = "real"

[switch]
policies = ["round-robin"]

[workload]
kind = "mix"
dynamic = [{ path = "/cgi-bin/cpu_light.cgi", weight = 10 }]
[workload.secure]
share = 0.5

[load]
engine = "closed"
levels = [4]
duration = "1s"
# No warm-up: the switch's pooled TLS connections to the nodes open inside the window, where
# their handshakes are counted.
warmup = "0s"
"#;

#[test]
fn secure_class_runs_through_the_switch_and_node_tls() {
    let dir = temp_dir("secure-exp");
    let file = dir.join("secure.toml");
    // Each run's real nodes write the tree here, not in a directory other tests share.
    let data = dir.join("data");
    let text = EXPERIMENT.replace(
        "resources = \"real\"",
        &format!(
            "resources = \"real\"\ndata_dir = {:?}",
            data.display().to_string()
        ),
    );
    std::fs::write(&file, text).unwrap();
    let (r, html, _) = run_lab("secure-run", &[file.to_str().unwrap(), "--quick"]);
    assert!(html.contains("Secure class over TLS"));
    let run = &r["series"][0]["runs"][0];
    let secure = &run["secure"];
    assert_eq!(secure["level"], 2.0, "{secure}");
    assert!(secure["completed"].as_u64().unwrap() > 0, "{secure}");
    assert_eq!(secure["errors"], 0, "{secure}");
    // The secure clients' connections were TLS handshakes at the switch: a full one at least
    // once per secure client (each is a user with its own session cache), resumed after that;
    // without keep-alive every request is a connection. The switch's connections to the real
    // nodes were TLS too.
    let handshakes = secure["switch_handshakes"].as_u64().unwrap();
    let resumed = secure["switch_resumed"].as_u64().unwrap();
    assert!(handshakes - resumed >= 2, "{secure}");
    assert!(resumed > 0, "{secure}");
    assert!(
        handshakes >= secure["completed"].as_u64().unwrap(),
        "{secure}"
    );
    assert!(secure["node_handshakes"].as_u64().unwrap() > 0, "{secure}");
    // In the totals, and apart among the classes: every secure class is a /secure/… path.
    let classes = run["per_class"].as_object().unwrap();
    let secure_requests: u64 = classes
        .iter()
        .filter(|(k, _)| k.starts_with("/secure/"))
        .map(|(_, v)| v["requests"].as_u64().unwrap())
        .sum();
    assert!(secure_requests > 0, "{classes:?}");
    assert!(classes.keys().any(|k| !k.starts_with("/secure/")));
    assert_eq!(run["errors"], 0, "{run}");
    let statuses: &Value = &run["status"];
    assert!(statuses.get("403").is_none(), "{statuses}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_secure_share_is_one_line() {
    let dir = temp_dir("secure-bad");
    let file = dir.join("bad.toml");
    std::fs::write(&file, EXPERIMENT.replace("share = 0.5", "share = 1.5")).unwrap();
    let out = capstan(&["lab", file.to_str().unwrap(), "--quick"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("workload.secure.share"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    // The same from the command line, on a built-in, and where it does not apply.
    for (args, needle) in [
        (
            vec!["lab", "cap-prototype", "--secure-tls", "0"],
            "workload.secure.share",
        ),
        (
            vec!["lab", "sclient-overload", "--secure-tls", "0.2"],
            "workload.secure works with",
        ),
        (
            vec!["lab", "validate", "--real-nodes"],
            "switch experiments",
        ),
        (vec!["lab", "sessions", "--secure-tls", "x"], "--secure-tls"),
        (
            vec![
                "lab",
                "cap-prototype",
                "--secure-tls",
                "0.2",
                "--engine",
                "sim",
            ],
            "not modelled",
        ),
    ] {
        let out = capstan(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The CAP paper's sessions with a secure share, emulated nodes: the secure sessions reach the
/// switch over TLS (a full handshake per session), the nodes in the clear, where `/secure/…`
/// pays the modelled SSL costs.
#[test]
fn secure_sessions_through_the_switch_tls_to_emulated_nodes() {
    let dir = temp_dir("secure-sessions");
    let file = dir.join("sessions.toml");
    let text = r#"
name = "secure-sessions-test"
title = "secure sessions over TLS"
figure = "test"

[nodes]
count = 2
tree = "cap"
files = 40

[switch]
policies = ["cap"]

[workload]
kind = "sessions"
think_scale = 0.01
[workload.secure]
share = 0.5

[load]
engine = "sessions"
levels = [8]
duration = "1s"
warmup = "0s"
keepalive = true
"#;
    std::fs::write(&file, text).unwrap();
    let (r, _html, _) = run_lab("secure-sessions-run", &[file.to_str().unwrap(), "--quick"]);
    let run = &r["series"][0]["runs"][0];
    let secure = &run["secure"];
    assert_eq!(secure["level"], 4.0, "{secure}");
    assert!(secure["completed"].as_u64().unwrap() > 0, "{secure}");
    assert_eq!(secure["errors"], 0, "{secure}");
    let full =
        secure["switch_handshakes"].as_u64().unwrap() - secure["switch_resumed"].as_u64().unwrap();
    assert!(full >= 1, "{secure}");
    assert_eq!(secure["node_handshakes"], 0, "{secure}");
    assert_eq!(run["errors"], 0, "{run}");
    let _ = std::fs::remove_dir_all(dir);
}
