//! The configuration surface: every policy by name, parsed from a `[policy]` table, printed back,
//! and built.

use serde::{Deserialize, Serialize};

use super::support::testing::check_common_behaviour;
use super::{build_policy, PolicyContext, PolicyError, PolicySpec};

#[derive(Debug, Deserialize, Serialize, PartialEq)]
struct Config {
    policy: PolicySpec,
}

fn parse(toml_text: &str) -> Result<PolicySpec, String> {
    toml::from_str::<Config>(toml_text)
        .map(|c| c.policy)
        .map_err(|e| e.to_string())
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_name_has_defaults_that_build_and_behave() {
    let nodes = names(&["a", "b", "c", "d"]);
    let classes = names(&["static", "disk", "cpu", "cpu-disk"]);
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    for name in PolicySpec::names() {
        let spec = PolicySpec::with_defaults(name).unwrap();
        assert_eq!(spec.name(), name);
        let policy = build_policy(&spec, &ctx).unwrap();
        assert_eq!(policy.name(), name);
        check_common_behaviour(policy.as_ref(), nodes.len());
    }
    assert_eq!(
        PolicySpec::with_defaults("fastest"),
        Err(PolicyError::UnknownPolicy("fastest".into()))
    );
}

#[test]
fn a_bare_name_gets_the_papers_defaults() {
    for name in PolicySpec::names() {
        let parsed = parse(&format!("[policy]\nname = \"{name}\"\n")).unwrap();
        assert_eq!(parsed, PolicySpec::with_defaults(name).unwrap(), "{name}");
    }
    // Defaults are the policy's own (the paper's), filled in when it is built.
    let spec = parse("[policy]\nname = \"lard-r\"").unwrap();
    assert!(spec.params().is_empty());
    let nodes = names(&["a", "b"]);
    let classes = names(&["static"]);
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    assert!(!build_policy(&spec, &ctx).unwrap().needs().gathered_load);
    let util = parse("[policy]\nname = \"lard-r\"\nload = \"utilisation\"").unwrap();
    assert!(build_policy(&util, &ctx).unwrap().needs().gathered_load);
}

#[test]
fn every_registration_has_help_and_a_unique_name() {
    let mut seen = std::collections::BTreeSet::new();
    for reg in super::registrations() {
        assert!(seen.insert(reg.name), "{} registered twice", reg.name);
        assert!(!reg.about.is_empty(), "{}", reg.name);
        // A seeded policy takes `seed`; others refuse it.
        let seed: toml::Table = toml::from_str("seed = 7").unwrap();
        assert_eq!((reg.check)(&seed).is_ok(), reg.seeded, "{}", reg.name);
    }
    assert_eq!(super::lookup("cap").unwrap().name, "cap");
    assert!(super::lookup("fastest").is_none());
}

#[test]
fn parameters_parse_and_print_back() {
    let text = r#"
        [policy]
        name = "static-partitioning"
        default = ["a"]
        [policy.partitions]
        cpu = ["c", "d"]
        disk = ["b"]
    "#;
    let spec = parse(text).unwrap();
    assert_eq!(spec.name(), "static-partitioning");
    let partitions = spec.param("partitions").unwrap();
    assert_eq!(partitions["cpu"], toml::Value::from(vec!["c", "d"]));
    assert_eq!(spec.param("default"), Some(&toml::Value::from(vec!["a"])));

    for spec in [
        spec.clone(),
        parse("[policy]\nname = \"lard\"\nt_low = 10\nt_high = 20\nmax_targets = 5000").unwrap(),
        parse("[policy]\nname = \"cap-load\"\nmax_load = 0.75").unwrap(),
        parse("[policy]\nname = \"consistent-hash\"\nepsilon = inf").unwrap(),
        parse("[policy]\nname = \"random\"\nseed = 99").unwrap(),
        parse("[policy]\nname = \"peak-ewma\"\ndecay_time_secs = 2.5").unwrap(),
        parse("[policy]\nname = \"cap\"\nclass_offsets = true").unwrap(),
        parse("[policy]\nname = \"lard\"\nload = \"utilisation\"\nt_high = 0.8").unwrap(),
        parse("[policy]\nname = \"weighted-round-robin\"\nmetric = \"active\"").unwrap(),
        parse(SWEB).unwrap(),
    ] {
        let printed = toml::to_string(&Config {
            policy: spec.clone(),
        })
        .unwrap();
        assert_eq!(parse(&printed).unwrap(), spec, "{printed}");
    }
}

const SWEB: &str = r#"
    [policy]
    name = "sweb"
    sigma = 0.5
    placement = "shared"
    client_rtt_ms = 80
    [policy.nodes.c]
    disk_mb_s = 20
    [policy.oracle.cpu]
    cpu_ms = 40
    net_kb = 8
    [policy.sizes]
    "/maps/**" = 1500000
    "/index.html" = 2000
"#;

#[test]
fn sweb_parameters_parse_with_the_papers_defaults_beside_them() {
    let spec = parse(SWEB).unwrap();
    let p: super::SwebParams = super::registry::typed(spec.params()).unwrap();
    assert_eq!(
        (p.sigma, p.client_rtt_ms, p.remote_penalty),
        (0.5, 80.0, 0.1)
    );
    assert_eq!(p.placement, super::Placement::Shared);
    assert_eq!(p.nodes["c"].disk_mb_s, Some(20.0));
    assert_eq!(p.oracle["cpu"].cpu_ms, 40.0);
    assert_eq!(p.sizes["/maps/**"], 1_500_000);
    assert_eq!(p.disk_mb_s, 5.0, "§3.3's b1");
    let defaults: super::SwebParams = super::registry::typed(&toml::Table::new()).unwrap();
    assert_eq!(defaults, super::SwebParams::default());
    let nodes = names(&["a", "b", "c", "d"]);
    let classes = names(&["static", "cpu"]);
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    assert_eq!(build_policy(&spec, &ctx).unwrap().name(), "sweb");
}

#[test]
fn unknown_names_and_parameters_are_refused() {
    let e = parse("[policy]\nname = \"fastest\"").unwrap_err();
    assert!(e.contains("fastest"), "{e}");
    let e = parse("[policy]\nname = \"lard\"\nt_hihg = 3").unwrap_err();
    assert!(e.contains("t_hihg"), "{e}");
    let e = parse("[policy]\nname = \"cap\"\nmax_load = 0.5").unwrap_err();
    assert!(e.contains("max_load"), "{e}");
    let e = parse("[policy]\nname = \"sweb\"\nsigam = 0.3").unwrap_err();
    assert!(e.contains("sigam"), "{e}");
    let e = parse("[policy]\nname = \"sweb\"\n[policy.nodes.a]\ndisk = 3").unwrap_err();
    assert!(e.contains("disk"), "{e}");
    let e = parse("[policy]\nname = \"home-node\"\nsigma = 0.3").unwrap_err();
    assert!(e.contains("sigma"), "{e}");
}

#[test]
fn invalid_parameters_fail_to_build_with_the_policy_named() {
    let nodes = names(&["a", "b"]);
    let classes = names(&["static"]);
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    let cases = [
        ("[policy]\nname = \"lard\"\nt_low = 70", "lard: t_low"),
        (
            "[policy]\nname = \"lard-r\"\nmax_targets = 1",
            "lard-r: max_targets",
        ),
        (
            "[policy]\nname = \"lard-r\"\nshrink_after_secs = -1.0",
            "lard-r: shrink_after_secs",
        ),
        (
            "[policy]\nname = \"consistent-hash\"\nepsilon = -1.0",
            "consistent-hash: epsilon",
        ),
        (
            "[policy]\nname = \"consistent-hash\"\nvirtual_nodes = 0",
            "consistent-hash: virtual_nodes",
        ),
        (
            "[policy]\nname = \"peak-ewma\"\ndecay_time_secs = 0.0",
            "peak-ewma: decay_time_secs",
        ),
        (
            "[policy]\nname = \"cap-load\"\nmax_load = 0.0",
            "cap-load: max_load",
        ),
        ("[policy]\nname = \"sweb\"\nsigma = -1.0", "sweb: sigma"),
        (
            "[policy]\nname = \"sweb\"\n[policy.nodes.z]\nspeed = 2.0",
            "sweb: nodes names node `z`",
        ),
        (
            "[policy]\nname = \"static-partitioning\"\npartitions = { static = [\"z\"] }",
            "static-partitioning: the partition of class `static` names node `z`",
        ),
    ];
    for (text, message) in cases {
        let spec = parse(text).unwrap();
        match build_policy(&spec, &ctx) {
            Err(PolicyError::Invalid(m)) => assert!(m.starts_with(message), "{m}"),
            Err(other) => panic!("{text}: {other:?}"),
            Ok(_) => panic!("{text}: built"),
        }
    }
}
