//! `capstan serve` with TLS listeners as a user runs it: examples/tls.toml served to curl over
//! HTTPS (HTTP/1.1 and HTTP/2) and h2c, and bad certificate files refused with one line.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

/// examples/tls.toml with free ports, the given nodes, and certificate paths made absolute,
/// written to a temporary file; returns it and the (plain, TLS, h2c) addresses.
fn example_config(nodes: &[std::net::SocketAddr]) -> (PathBuf, [std::net::SocketAddr; 3]) {
    let example = repo_root().join("examples/tls.toml");
    let mut text = std::fs::read_to_string(&example).unwrap();
    let addrs = [free_addr(), free_addr(), free_addr()];
    for (from, to) in [
        ("127.0.0.1:8080", addrs[0].to_string()),
        ("127.0.0.1:8443", addrs[1].to_string()),
        ("127.0.0.1:8081", addrs[2].to_string()),
        ("127.0.0.1:9900", free_addr().to_string()),
        ("127.0.0.1:9001", nodes[0].to_string()),
        ("127.0.0.1:9002", nodes[1].to_string()),
        (
            "\"tls/",
            format!("\"{}/", repo_root().join("examples/tls").display()),
        ),
    ] {
        assert!(text.contains(from), "examples/tls.toml has {from}");
        text = text.replace(from, &to);
    }
    let dir = std::env::temp_dir().join(format!("capstan-tls-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("tls-{}.toml", addrs[1].port()));
    std::fs::write(&path, text).unwrap();
    (path, addrs)
}

/// `curl ARGS` → (HTTP version curl used, status, body); `None` when curl is not installed.
fn curl(args: &[&str]) -> Option<(String, String, String)> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_version} %{http_code}",
        ])
        .args(args)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (version, status) = tail.split_once(' ').unwrap();
    Some((version.into(), status.into(), body.into()))
}

fn curl_supports_http2() -> bool {
    Command::new("curl")
        .arg("-V")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("HTTP2"))
}

#[test]
fn the_tls_example_serves_https_and_http2_to_curl() {
    if !curl_supports_http2() {
        eprintln!("note: curl with HTTP/2 support is not installed; test skipped");
        return;
    }
    let (_n1, a1) = origin(&[]);
    let (_n2, a2) = origin(&[]);
    let (path, [plain, tls, h2c]) = example_config(&[a1, a2]);
    let out = run(&["check", path.to_str().unwrap()]);
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        described.contains(&format!("listener  https://{tls} (ALPN h2, http/1.1"))
            && described.contains("localhost | www.example.test example.test | *.api.example.test"),
        "{described}"
    );
    let _switch = spawn(&["serve", "--config", path.to_str().unwrap()], tls);
    let ca = repo_root().join("examples/tls/ca.pem");
    let ca = ca.to_str().unwrap();
    let url = format!("https://localhost:{}/file5k.html", tls.port());

    let (version, status, body) = curl(&["--cacert", ca, "--http2", &url]).unwrap();
    assert_eq!((version.as_str(), status.as_str()), ("2", "200"));
    assert_eq!(body.len(), 5125);
    let (version, status, _) = curl(&["--cacert", ca, "--http1.1", &url]).unwrap();
    assert_eq!((version.as_str(), status.as_str()), ("1.1", "200"));
    let (version, _, _) = curl(&[
        "--cacert",
        ca,
        "--http2",
        "--tlsv1.2",
        "--tls-max",
        "1.2",
        &url,
    ])
    .unwrap();
    assert_eq!(version, "2");

    // SNI: curl checks the certificate against the name it asked for.
    let resolve = format!("www.example.test:{}:127.0.0.1", tls.port());
    let www = format!("https://www.example.test:{}/file500.html", tls.port());
    let (_, status, _) = curl(&["--cacert", ca, "--resolve", &resolve, &www]).unwrap();
    assert_eq!(status, "200");

    let h2c_url = format!("http://{h2c}/file500.html");
    let (version, status, _) = curl(&["--http2-prior-knowledge", &h2c_url]).unwrap();
    assert_eq!((version.as_str(), status.as_str()), ("2", "200"));
    let (version, _, _) = curl(&[&h2c_url]).unwrap();
    assert_eq!(version, "1.1");
    assert_eq!(get(plain, "/file500.html").status, 200);
}

#[test]
fn bad_certificate_files_are_one_line_errors_from_check_and_serve() {
    let dir = std::env::temp_dir().join(format!("capstan-tls-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("empty.pem"), "").unwrap();
    let pki = repo_root().join("examples/tls");
    let pem = |f: &str| pki.join(f).display().to_string();
    let listen = free_addr();
    for (cert, key, want) in [
        (
            pem("nope.pem"),
            pem("localhost.key"),
            "nope.pem: cannot read",
        ),
        (
            dir.join("empty.pem").display().to_string(),
            pem("localhost.key"),
            "no CERTIFICATE",
        ),
        (
            pem("localhost.pem"),
            pem("api.example.test.key"),
            "does not match the certificate",
        ),
    ] {
        let path = dir.join("bad.toml");
        std::fs::write(
            &path,
            format!(
                "[[listener]]\naddress = \"{listen}\"\n[[listener.certificate]]\ncert = \"{cert}\"\nkey = \"{key}\"\n[[node]]\naddress = \"127.0.0.1:9\"\n"
            ),
        )
        .unwrap();
        for args in [
            vec!["check", path.to_str().unwrap()],
            vec!["serve", "--config", path.to_str().unwrap()],
        ] {
            let out = run(&args);
            let stderr = String::from_utf8(out.stderr).unwrap();
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            assert!(stderr.contains(want), "{args:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!("capstan: {}:", path.display())),
                "{stderr}"
            );
        }
    }
    assert!(!accepts(listen), "nothing was served");
}
