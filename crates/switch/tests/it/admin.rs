//! The admin surface: the bearer token on mutating endpoints, open reads, and no admin path
//! on a client listener.

use crate::common;

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

const TOKEN: &str = "test-admin-token-0123456789";

/// A switch loaded from a file (so that `POST /reload` has something to re-read) whose token
/// lives in a file next to it, named by a relative path.
async fn switch_with_token_file(
    node: &Backend,
    dir_name: &str,
) -> (capstan_switch::Running, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("capstan-{dir_name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("admin.token"), format!("{TOKEN}\n")).unwrap();
    let path = dir.join("switch.toml");
    std::fs::write(
        &path,
        config_for(&[node], "admin_token_file = \"admin.token\""),
    )
    .unwrap();
    let config = capstan_switch::Config::load(&path).expect("valid config");
    let running = capstan_switch::start(config).await.expect("switch starts");
    (running, dir)
}

async fn post(addr: std::net::SocketAddr, path: &str, authorization: Option<&str>) -> Answer {
    let mut req = Request::post(path);
    if let Some(value) = authorization {
        req = req.header("authorization", value);
    }
    send(addr, req, Bytes::new()).await
}

#[tokio::test]
async fn mutating_admin_endpoints_need_the_token_and_reads_stay_open() {
    let node = Backend::start("a").await;
    let (sw, dir) = switch_with_token_file(&node, "admin-token").await;
    let admin = sw.admin_addr.unwrap();
    for path in [
        "/reload",
        "/cache/purge?url=http://x/",
        "/cache/ban?prefix=http://x/",
        "/nodes?address=127.0.0.1:1",
        "/nodes/a/drain",
    ] {
        let missing = post(admin, path, None).await;
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            missing.header("www-authenticate"),
            "Bearer realm=\"capstan-admin\"",
            "{path}"
        );
        let wrong = post(admin, path, Some("Bearer test-admin-token-0123456788")).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(
            wrong.header("www-authenticate").contains("invalid_token"),
            "{path}"
        );
        let basic = post(admin, path, Some(&format!("Basic {TOKEN}"))).await;
        assert_eq!(
            basic.status,
            StatusCode::UNAUTHORIZED,
            "{path}: only Bearer"
        );
    }
    // Unknown and other-method requests are refused before routing: nothing to probe.
    let delete = send(admin, Request::delete("/anything"), Bytes::new()).await;
    assert_eq!(delete.status, StatusCode::UNAUTHORIZED);
    let delete = send(admin, Request::delete("/nodes/a"), Bytes::new()).await;
    assert_eq!(delete.status, StatusCode::UNAUTHORIZED);
    let status = status_json(admin).await;
    assert_eq!(status["reloads"], 0, "no refused reload ran");
    assert_eq!(status["generation"], 1, "no refused membership change ran");
    assert_eq!(
        status["nodes"][0]["draining"], false,
        "no refused drain ran"
    );

    let bearer = format!("Bearer {TOKEN}");
    let reload = post(admin, "/reload", Some(&bearer)).await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    assert!(reload.text().starts_with("reloaded"), "{}", reload.text());
    let purge = post(admin, "/cache/purge?url=http://x/", Some(&bearer)).await;
    assert_eq!(
        purge.status,
        StatusCode::NOT_FOUND,
        "past the token; the cache is off: {}",
        purge.text()
    );
    assert_eq!(status_json(admin).await["reloads"], 1);
    for path in ["/", "/status", "/metrics"] {
        assert_eq!(get(admin, path).await.status, StatusCode::OK, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_reload_reads_the_token_file_again() {
    let node = Backend::start("a").await;
    let (sw, dir) = switch_with_token_file(&node, "admin-token-rotate").await;
    let admin = sw.admin_addr.unwrap();
    let rotated = "rotated-admin-token-9876543210";
    std::fs::write(dir.join("admin.token"), rotated).unwrap();
    let reload = post(admin, "/reload", Some(&format!("Bearer {TOKEN}"))).await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    let old = post(admin, "/reload", Some(&format!("Bearer {TOKEN}"))).await;
    assert_eq!(
        old.status,
        StatusCode::UNAUTHORIZED,
        "the old token is gone"
    );
    let new = post(admin, "/reload", Some(&format!("Bearer {rotated}"))).await;
    assert_eq!(new.status, StatusCode::OK, "{}", new.text());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn without_a_token_the_admin_is_open_as_before() {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let reload = post(sw.admin_addr.unwrap(), "/reload", None).await;
    assert_eq!(
        reload.status,
        StatusCode::BAD_REQUEST,
        "reached the reload itself: {}",
        reload.text()
    );
    assert!(reload.text().contains("without a configuration file"));
}

/// A client listener is never the admin: `/status`, `/metrics` and `POST /reload` sent to it
/// are ordinary requests for a node.
#[tokio::test]
async fn admin_paths_on_a_client_listener_go_to_a_node() {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(
        &[&node],
        "admin_token = \"test-admin-token-0123456789\"",
    ))
    .await;
    let client = sw.listen_addrs[0];
    for path in ["/status", "/metrics", "/"] {
        let a = get(client, path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert_eq!(a.text(), "a", "{path}: the node's answer, not the admin's");
        assert_eq!(a.node(), "a");
    }
    for path in ["/reload", "/cache/purge?url=http://x/"] {
        let a = post(client, path, Some(&format!("Bearer {TOKEN}"))).await;
        assert_eq!(a.text(), "a", "{path}: the node's answer");
    }
    assert_eq!(node.hits(), 5);
    assert_eq!(status_json(sw.admin_addr.unwrap()).await["reloads"], 0);
}
