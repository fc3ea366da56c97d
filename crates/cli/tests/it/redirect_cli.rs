//! SWEB's URL redirection as a user runs it: `capstan serve` with `[redirect]` in front of two
//! `capstan origin` nodes, and `capstan bench --follow-redirects` reporting redirected requests
//! apart.

use crate::support;

use support::*;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-redir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn bench_json(dir: &std::path::Path, url: &str, extra: &[&str]) -> serde_json::Value {
    let out = dir.join("bench.json");
    let out_s = out.to_str().unwrap();
    let mut args = vec![
        "bench",
        url,
        "--clients",
        "2",
        "--duration",
        "1s",
        "--json",
        out_s,
    ];
    args.extend_from_slice(extra);
    let run = run(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

#[test]
fn bench_follows_the_switchs_redirects_and_counts_them_apart() {
    let dir = temp_dir("follow");
    let (_a, a) = origin(&[]);
    let (_b, b) = origin(&[]);
    let listen = free_addr();
    let config = format!(
        "listen = [\"{listen}\"]\n[redirect]\n\
         [[node]]\nname = \"a\"\naddress = \"{a}\"\npublic_url = \"http://{a}\"\n\
         [[node]]\nname = \"b\"\naddress = \"{b}\"\npublic_url = \"http://{b}\"\n"
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let _switch = spawn(&["serve", "--config", path.to_str().unwrap()], listen);
    let url = format!("http://{listen}/file5k.html");

    let plain = bench_json(&dir, &url, &[]);
    let completed = plain["completed"].as_u64().unwrap();
    assert!(completed > 0, "{plain}");
    assert_eq!(plain["status"]["3xx"].as_u64(), Some(completed), "{plain}");
    assert_eq!(plain["redirected_ms"]["count"], 0);

    let followed = bench_json(&dir, &url, &["--follow-redirects"]);
    let completed = followed["completed"].as_u64().unwrap();
    assert!(completed > 0, "{followed}");
    assert_eq!(followed["errors_total"], 0, "{followed}");
    assert_eq!(
        followed["status"]["2xx"].as_u64(),
        Some(completed),
        "{followed}"
    );
    assert_eq!(followed["redirected_ms"]["count"].as_u64(), Some(completed));
    let _ = std::fs::remove_dir_all(&dir);
}
