//! `capstan sim` sweeps as a process: --nodes-sweep, --rate-sweep, the T_gat sweep with flat
//! baselines (CAP Fig. 3b), --set overrides and `sim results-md`, in quick form.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn capstan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-simsweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

const QUICK: [&str; 8] = [
    "--duration",
    "20s",
    "--replications",
    "2",
    "--quiet",
    "--policies",
    "cap,round-robin",
    "--seed",
];

fn sweep(flag: &str, values: &str, out: &Path) -> serde_json::Value {
    let mut args = vec!["sim", "commerce", flag, values];
    args.extend(QUICK);
    args.extend(["2", "--out", out.to_str().unwrap()]);
    if flag == "--nodes-sweep" {
        args.extend(["--rate", "20"]);
    } else {
        args.extend(["--nodes", "3"]);
    }
    let o = capstan(&args);
    ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("cap") && stdout.contains("round-robin"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 1);
    json(&out.join("sweep.json"))
}

#[test]
fn nodes_and_rate_sweeps_write_consistent_json_and_a_plot() {
    let dir = scratch("axes");
    for (flag, values, axis) in [
        ("--nodes-sweep", "2,4", "nodes"),
        ("--rate-sweep", "10,30", "rate"),
    ] {
        let v = sweep(flag, values, &dir.join(axis));
        assert_eq!(v["axis"], axis);
        assert_eq!(v["values"].as_array().unwrap().len(), 2);
        let series = v["series"].as_array().unwrap();
        assert_eq!(series.len(), 2);
        for s in series {
            let pts = s["points"].as_array().unwrap();
            assert_eq!(pts.len(), 2);
            for (p, x) in pts.iter().zip(v["values"].as_array().unwrap()) {
                assert_eq!(&p["x"], x);
                assert!(p["pages"].as_u64().unwrap() > 50);
                let within = p["within_5s"].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&within));
            }
        }
        let info = json(&dir.join(axis).join("run-info.json"));
        assert_eq!(info["runs"], 2 * 2 * 2);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tgat_sweep_with_baselines_overrides_and_results_md() {
    let dir = scratch("fig3b");
    let out = dir.join("fig3b");
    let o = capstan(&[
        "sim",
        "commerce",
        "--tgat-sweep",
        "0,2",
        "--policies",
        "random,round-robin",
        "--nodes",
        "3",
        "--rate",
        "20",
        "--duration",
        "20s",
        "--replications",
        "1",
        "--quiet",
        "--set",
        "workload.zipf-alpha=0.6",
        "--set",
        "node.ssl.rsa_kbit_per_s=3.85",
        // A second field of the same table: one `[node.ssl]`, not two.
        "--set",
        "node.ssl.des3_kbit_per_s=4688.6",
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let v = json(&out.join("results.json"));
    assert_eq!(v["scenario"]["workload"]["zipf-alpha"], 0.6);
    assert_eq!(v["scenario"]["node"]["ssl"]["rsa_kbit_per_s"], 3.85);
    assert_eq!(v["scenario"]["node"]["ssl"]["des3_kbit_per_s"], 4688.6);
    assert_eq!(v["tgat"].as_array().unwrap().len(), 4);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.matches("<svg").count() == 2 && html.contains("round-robin"));
    let template = dir.join("t.md");
    std::fs::write(
        &template,
        "{{tgat fig3b}}\n\nRR {{p90 fig3b round-robin}} ms\n",
    )
    .unwrap();
    let md_path = dir.join("out.md");
    ok(&capstan(&[
        "sim",
        "results-md",
        "--template",
        template.to_str().unwrap(),
        "--results",
        dir.to_str().unwrap(),
        "--out",
        md_path.to_str().unwrap(),
    ]));
    let md = std::fs::read_to_string(&md_path).unwrap();
    let rr = v["policies"][1]["p90"]["value"].as_f64().unwrap();
    assert!(md.contains(&format!("RR {rr:.0} ms")), "{md}");
    assert!(md.contains("| 0 | ") && md.contains("| 2 | ") && md.contains("random p90 ms"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_sweep_input_is_one_line() {
    let missing = std::env::temp_dir().join("capstan-no-such-template.md");
    for args in [
        &["sim", "commerce", "--nodes-sweep", "0,4"][..],
        &["sim", "commerce", "--nodes-sweep", "2.5"],
        &["sim", "commerce", "--rate-sweep", "-5"],
        &["sim", "commerce", "--rate-sweep", "100,x"],
        &["sim", "commerce", "--set", "workload.zipf-alpha=-1"],
        &["sim", "commerce", "--set", "nothing"],
        &["sim", "commerce", "--set", "workload.bogus=1"],
        &["sim", "sweb-skewed", "--nodes-sweep", "2"],
        &[
            "sim",
            "results-md",
            "--template",
            missing.to_str().unwrap(),
            "--results",
            ".",
        ],
    ] {
        let out = capstan(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("capstan: "), "{err}");
    }
}
