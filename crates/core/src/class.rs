//! Request classes and the ordered rules that assign a request to one.
//!
//! A class stands for the kind of load a request puts on a back-end node (the CAP paper's N, DB,
//! CB and DCB, or classes the operator defines). Rules are tried in order; the first whose every
//! condition holds wins; a request no rule matches falls into the default class.

use globset::{Glob, GlobMatcher};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// Index of a class in the classifier's class list.
pub type ClassId = usize;

/// Expected demand of one request of a class on a node's resources, for the policies that weigh
/// requests (SWEB's cost estimate, load-aware CAP). Units: milliseconds of CPU and disk time,
/// kilobytes sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceProfile {
    #[serde(default)]
    pub cpu_ms: f64,
    #[serde(default)]
    pub disk_ms: f64,
    #[serde(default)]
    pub net_kb: f64,
}

/// A class as written in the configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    pub name: String,
    #[serde(default, flatten)]
    pub profile: ResourceProfile,
}

/// A resolved class.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassDef {
    pub name: String,
    pub profile: ResourceProfile,
}

/// One rule as written in the configuration. Every condition given must hold; at least one must
/// be given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The class a matching request belongs to.
    pub class: String,
    /// The path starts with this string (`/cgi-bin/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// The path matches this glob (`/cgi-bin/*.cgi`; `*` does not cross `/`, `**` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The path matches this regular expression (unanchored unless written with `^`/`$`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// The path's file extension is one of these (without the dot, case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<Vec<String>>,
    /// The method is one of these (case-sensitive, as HTTP says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Vec<String>>,
    /// The request has a query string (`true`) or has none (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<bool>,
    /// The request carries this header (name, case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// With `header`: its value matches this glob (`*` matches anything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
    /// The client came over TLS (`true`) or in the clear (`false`): the CAP paper's secure
    /// class is one of its own because every request of it pays for encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    /// The TLS client's SNI name matches this glob (case-insensitive; `*.example.org`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// What is wrong with a set of classes and rules.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClassifierError {
    #[error("class `{0}` is defined twice")]
    DuplicateClass(String),
    #[error("class name must not be empty")]
    EmptyClassName,
    #[error("rule {rule} names class `{class}`, which is not defined (defined: {defined})")]
    UnknownClass {
        rule: usize,
        class: String,
        defined: String,
    },
    #[error("default class `{class}` is not defined (defined: {defined})")]
    UnknownDefault { class: String, defined: String },
    #[error("rule {rule} has no condition; give at least one of path_prefix, glob, regex, extension, method, query, header, tls, sni")]
    NoCondition { rule: usize },
    #[error("rule {rule}: bad glob `{pattern}`: {reason}")]
    BadGlob {
        rule: usize,
        pattern: String,
        reason: String,
    },
    #[error("rule {rule}: bad regex `{pattern}`: {reason}")]
    BadRegex {
        rule: usize,
        pattern: String,
        reason: String,
    },
    #[error("rule {rule}: header_value needs header")]
    ValueWithoutHeader { rule: usize },
    #[error("class `{class}`: {field} must be a finite number ≥ 0")]
    BadProfile { class: String, field: &'static str },
}

/// The parts of a request a rule can look at.
pub struct RequestFacts<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The request's headers.
    pub headers: &'a dyn HeaderLookup,
    /// The request came over TLS.
    pub tls: bool,
    /// The TLS client's SNI name, if it sent one.
    pub sni: Option<&'a str>,
}

/// Header access for the classifier, so `core` needs no HTTP library.
pub trait HeaderLookup {
    /// The first value of the header with this lower-case name, if present and valid text.
    fn header(&self, lower_case_name: &str) -> Option<&str>;
}

/// A request without headers.
pub struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn header(&self, _: &str) -> Option<&str> {
        None
    }
}

impl HeaderLookup for &[(&str, &str)] {
    fn header(&self, lower_case_name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(lower_case_name))
            .map(|(_, v)| *v)
    }
}

#[derive(Debug)]
enum Condition {
    PathPrefix(String),
    Glob(GlobMatcher),
    Regex(Regex),
    Extension(Vec<String>),
    Method(Vec<String>),
    Query(bool),
    Header {
        name: String,
        value: Option<GlobMatcher>,
    },
    Tls(bool),
    Sni(GlobMatcher),
}

impl Condition {
    fn holds(&self, req: &RequestFacts<'_>) -> bool {
        match self {
            Condition::PathPrefix(prefix) => req.path.starts_with(prefix.as_str()),
            Condition::Glob(glob) => glob.is_match(req.path),
            Condition::Regex(re) => re.is_match(req.path),
            Condition::Extension(exts) => extension_of(req.path)
                .is_some_and(|ext| exts.iter().any(|e| e.eq_ignore_ascii_case(ext))),
            Condition::Method(methods) => methods.iter().any(|m| m == req.method),
            Condition::Query(present) => req.query.is_some_and(|q| !q.is_empty()) == *present,
            Condition::Header { name, value } => match req.headers.header(name) {
                None => false,
                Some(v) => value.as_ref().is_none_or(|g| g.is_match(v)),
            },
            Condition::Tls(tls) => req.tls == *tls,
            Condition::Sni(glob) => req.sni.is_some_and(|name| glob.is_match(name)),
        }
    }
}

/// The extension of the last path segment, without the dot.
fn extension_of(path: &str) -> Option<&str> {
    let segment = path.rsplit('/').next()?;
    let dot = segment.rfind('.')?;
    Some(&segment[dot + 1..]).filter(|ext| !ext.is_empty())
}

#[derive(Debug)]
struct Rule {
    conditions: Vec<Condition>,
    class: ClassId,
}

/// Classes and ordered rules, resolved and ready to classify.
#[derive(Debug)]
pub struct Classifier {
    classes: Vec<ClassDef>,
    rules: Vec<Rule>,
    specs: Vec<RuleSpec>,
    default: ClassId,
}

fn path_glob(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    Ok(globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()?
        .compile_matcher())
}

impl Classifier {
    /// Resolves classes and rules. `default` names the class for requests no rule matches.
    pub fn new(
        classes: &[ClassSpec],
        rules: &[RuleSpec],
        default: &str,
    ) -> Result<Self, ClassifierError> {
        let mut defs: Vec<ClassDef> = Vec::with_capacity(classes.len());
        for spec in classes {
            if spec.name.is_empty() {
                return Err(ClassifierError::EmptyClassName);
            }
            if defs.iter().any(|d| d.name == spec.name) {
                return Err(ClassifierError::DuplicateClass(spec.name.clone()));
            }
            check_profile(&spec.name, &spec.profile)?;
            defs.push(ClassDef {
                name: spec.name.clone(),
                profile: spec.profile,
            });
        }
        let defined = || {
            defs.iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let find = |name: &str| defs.iter().position(|d| d.name == name);
        let default_id = find(default).ok_or_else(|| ClassifierError::UnknownDefault {
            class: default.to_string(),
            defined: defined(),
        })?;
        let mut resolved = Vec::with_capacity(rules.len());
        for (i, spec) in rules.iter().enumerate() {
            let rule_no = i + 1;
            let class = find(&spec.class).ok_or_else(|| ClassifierError::UnknownClass {
                rule: rule_no,
                class: spec.class.clone(),
                defined: defined(),
            })?;
            resolved.push(Rule {
                conditions: conditions_of(rule_no, spec)?,
                class,
            });
        }
        Ok(Classifier {
            classes: defs,
            rules: resolved,
            specs: rules.to_vec(),
            default: default_id,
        })
    }

    /// The CAP paper's four classes with rules matching `capstan origin`'s services:
    /// `static` (N) by default, `disk` (DB) for `/cgi-bin/disk*`, `cpu` (CB) for `/cgi-bin/cpu*`
    /// and `/secure/`, `cpu-disk` (DCB) for `/cgi-bin/db*` and `/secure/cgi-bin/`.
    pub fn cap_defaults() -> Self {
        let (classes, rules) = cap_default_specs();
        Classifier::new(&classes, &rules, "static").expect("built-in classes are valid")
    }

    /// The class of a request.
    pub fn classify(&self, req: &RequestFacts<'_>) -> ClassId {
        self.rules
            .iter()
            .find(|rule| rule.conditions.iter().all(|c| c.holds(req)))
            .map_or(self.default, |rule| rule.class)
    }

    pub fn classes(&self) -> &[ClassDef] {
        &self.classes
    }

    pub fn class(&self, id: ClassId) -> &ClassDef {
        &self.classes[id]
    }

    pub fn class_id(&self, name: &str) -> Option<ClassId> {
        self.classes.iter().position(|c| c.name == name)
    }

    pub fn default_class(&self) -> ClassId {
        self.default
    }

    /// The rules as configured, in order.
    pub fn rules(&self) -> &[RuleSpec] {
        &self.specs
    }
}

fn check_profile(class: &str, p: &ResourceProfile) -> Result<(), ClassifierError> {
    for (field, v) in [
        ("cpu_ms", p.cpu_ms),
        ("disk_ms", p.disk_ms),
        ("net_kb", p.net_kb),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(ClassifierError::BadProfile {
                class: class.to_string(),
                field,
            });
        }
    }
    Ok(())
}

fn conditions_of(rule: usize, spec: &RuleSpec) -> Result<Vec<Condition>, ClassifierError> {
    let mut out = Vec::new();
    if let Some(prefix) = &spec.path_prefix {
        out.push(Condition::PathPrefix(prefix.clone()));
    }
    if let Some(pattern) = &spec.glob {
        let glob = path_glob(pattern).map_err(|e| ClassifierError::BadGlob {
            rule,
            pattern: pattern.clone(),
            reason: e.kind().to_string(),
        })?;
        out.push(Condition::Glob(glob));
    }
    if let Some(pattern) = &spec.regex {
        let re = Regex::new(pattern).map_err(|e| ClassifierError::BadRegex {
            rule,
            pattern: pattern.clone(),
            reason: e
                .to_string()
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_string(),
        })?;
        out.push(Condition::Regex(re));
    }
    if let Some(exts) = &spec.extension {
        let exts = exts
            .iter()
            .map(|e| e.trim_start_matches('.').to_string())
            .collect();
        out.push(Condition::Extension(exts));
    }
    if let Some(methods) = &spec.method {
        out.push(Condition::Method(methods.clone()));
    }
    if let Some(present) = spec.query {
        out.push(Condition::Query(present));
    }
    match (&spec.header, &spec.header_value) {
        (Some(name), value) => {
            let value = match value {
                None => None,
                Some(pattern) => Some(
                    Glob::new(pattern)
                        .map_err(|e| ClassifierError::BadGlob {
                            rule,
                            pattern: pattern.clone(),
                            reason: e.kind().to_string(),
                        })?
                        .compile_matcher(),
                ),
            };
            out.push(Condition::Header {
                name: name.to_ascii_lowercase(),
                value,
            });
        }
        (None, Some(_)) => return Err(ClassifierError::ValueWithoutHeader { rule }),
        (None, None) => {}
    }
    if let Some(tls) = spec.tls {
        out.push(Condition::Tls(tls));
    }
    if let Some(pattern) = &spec.sni {
        let glob = globset::GlobBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map_err(|e| ClassifierError::BadGlob {
                rule,
                pattern: pattern.clone(),
                reason: e.kind().to_string(),
            })?;
        out.push(Condition::Sni(glob.compile_matcher()));
    }
    if out.is_empty() {
        return Err(ClassifierError::NoCondition { rule });
    }
    Ok(out)
}

/// The built-in classes and rules (see [`Classifier::cap_defaults`]). Demands follow the Jones
/// thesis's services: cpu-light ≈ 40 ms and cpu-heavy ≈ 100 ms of CPU, disk ≈ 100 ms of disk.
pub fn cap_default_specs() -> (Vec<ClassSpec>, Vec<RuleSpec>) {
    let class = |name: &str, cpu_ms: f64, disk_ms: f64, net_kb: f64| ClassSpec {
        name: name.to_string(),
        profile: ResourceProfile {
            cpu_ms,
            disk_ms,
            net_kb,
        },
    };
    let classes = vec![
        class("static", 0.5, 1.0, 10.0),
        class("disk", 5.0, 100.0, 2.0),
        class("cpu", 100.0, 0.0, 2.0),
        class("cpu-disk", 100.0, 100.0, 2.0),
    ];
    let prefix = |class: &str, prefix: &str| RuleSpec {
        class: class.to_string(),
        path_prefix: Some(prefix.to_string()),
        ..RuleSpec::default()
    };
    let rules = vec![
        prefix("cpu-disk", "/secure/cgi-bin/"),
        prefix("cpu-disk", "/cgi-bin/db"),
        prefix("disk", "/cgi-bin/disk"),
        prefix("cpu", "/cgi-bin/cpu"),
        prefix("cpu", "/secure/"),
    ];
    (classes, rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(
        method: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        headers: &'a dyn HeaderLookup,
    ) -> RequestFacts<'a> {
        RequestFacts {
            method,
            path,
            query,
            headers,
            tls: false,
            sni: None,
        }
    }

    fn class_of(c: &Classifier, method: &str, path: &str, query: Option<&str>) -> String {
        let f = facts(method, path, query, &NoHeaders);
        c.class(c.classify(&f)).name.clone()
    }

    fn rule(class: &str) -> RuleSpec {
        RuleSpec {
            class: class.into(),
            ..RuleSpec::default()
        }
    }

    fn classes(names: &[&str]) -> Vec<ClassSpec> {
        names
            .iter()
            .map(|n| ClassSpec {
                name: n.to_string(),
                profile: ResourceProfile::default(),
            })
            .collect()
    }

    #[test]
    fn cap_defaults_classify_the_origin_services() {
        let c = Classifier::cap_defaults();
        assert_eq!(class_of(&c, "GET", "/file5k.html", None), "static");
        assert_eq!(class_of(&c, "GET", "/cgi-bin/cpu_light.cgi", None), "cpu");
        assert_eq!(class_of(&c, "GET", "/cgi-bin/cpu_med.cgi", None), "cpu");
        assert_eq!(
            class_of(&c, "GET", "/cgi-bin/disk_load.cgi", Some("file=a")),
            "disk"
        );
        assert_eq!(class_of(&c, "GET", "/secure/file5k.html", None), "cpu");
        assert_eq!(
            class_of(&c, "GET", "/secure/cgi-bin/x.cgi", None),
            "cpu-disk"
        );
    }

    #[test]
    fn first_matching_rule_wins_in_order() {
        let mut a = rule("a");
        a.path_prefix = Some("/x/".into());
        let mut b = rule("b");
        b.path_prefix = Some("/x/y".into());
        let c = Classifier::new(&classes(&["a", "b", "d"]), &[a, b], "d").unwrap();
        assert_eq!(class_of(&c, "GET", "/x/y/z", None), "a");
        assert_eq!(class_of(&c, "GET", "/q", None), "d");
    }

    #[test]
    fn glob_star_stays_within_a_segment() {
        let mut r = rule("cgi");
        r.glob = Some("/cgi-bin/*.cgi".into());
        let c = Classifier::new(&classes(&["cgi", "other"]), &[r], "other").unwrap();
        assert_eq!(class_of(&c, "GET", "/cgi-bin/a.cgi", None), "cgi");
        assert_eq!(class_of(&c, "GET", "/cgi-bin/sub/a.cgi", None), "other");
    }

    #[test]
    fn every_condition_must_hold() {
        let mut r = rule("post-api");
        r.path_prefix = Some("/api/".into());
        r.method = Some(vec!["POST".into()]);
        r.query = Some(false);
        let c = Classifier::new(&classes(&["post-api", "other"]), &[r], "other").unwrap();
        assert_eq!(class_of(&c, "POST", "/api/x", None), "post-api");
        assert_eq!(class_of(&c, "GET", "/api/x", None), "other");
        assert_eq!(class_of(&c, "POST", "/api/x", Some("a=1")), "other");
        assert_eq!(class_of(&c, "POST", "/api/x", Some("")), "post-api");
    }

    #[test]
    fn extension_regex_and_header_conditions() {
        let mut img = rule("img");
        img.extension = Some(vec![".PNG".into(), "jpg".into()]);
        let mut dyn_ = rule("dyn");
        dyn_.regex = Some(r"\.(php|cgi)$".into());
        let mut tenant = rule("tenant");
        tenant.header = Some("X-Tenant".into());
        tenant.header_value = Some("gold-*".into());
        let c = Classifier::new(
            &classes(&["img", "dyn", "tenant", "other"]),
            &[img, dyn_, tenant],
            "other",
        )
        .unwrap();
        assert_eq!(class_of(&c, "GET", "/a/b.png", None), "img");
        assert_eq!(class_of(&c, "GET", "/a.b/c", None), "other");
        assert_eq!(class_of(&c, "GET", "/x/index.php", None), "dyn");
        let gold: &[(&str, &str)] = &[("X-Tenant", "gold-7")];
        let f = facts("GET", "/", None, &gold);
        assert_eq!(c.class(c.classify(&f)).name, "tenant");
        let silver: &[(&str, &str)] = &[("X-Tenant", "silver")];
        let f = facts("GET", "/", None, &silver);
        assert_eq!(c.class(c.classify(&f)).name, "other");
    }

    #[test]
    fn configuration_mistakes_are_named() {
        let mut r = rule("nope");
        r.path_prefix = Some("/".into());
        let err = Classifier::new(&classes(&["a"]), &[r], "a").unwrap_err();
        assert!(err.to_string().contains("`nope`"), "{err}");

        let err = Classifier::new(&classes(&["a"]), &[rule("a")], "a").unwrap_err();
        assert_eq!(err, ClassifierError::NoCondition { rule: 1 });

        let mut r = rule("a");
        r.regex = Some("(".into());
        let err = Classifier::new(&classes(&["a"]), &[r], "a").unwrap_err();
        assert!(
            matches!(err, ClassifierError::BadRegex { rule: 1, .. }),
            "{err}"
        );

        let err = Classifier::new(&classes(&["a", "a"]), &[], "a").unwrap_err();
        assert_eq!(err, ClassifierError::DuplicateClass("a".into()));

        let err = Classifier::new(&classes(&["a"]), &[], "b").unwrap_err();
        assert!(matches!(err, ClassifierError::UnknownDefault { .. }));

        let mut bad = classes(&["a"]);
        bad[0].profile.cpu_ms = -1.0;
        assert!(matches!(
            Classifier::new(&bad, &[], "a").unwrap_err(),
            ClassifierError::BadProfile { .. }
        ));
    }

    #[test]
    fn tls_and_sni_rules() {
        let secure = RuleSpec {
            sni: Some("*.Shop.example".into()),
            ..rule("cpu")
        };
        let any_tls = RuleSpec {
            tls: Some(true),
            ..rule("disk")
        };
        let c = Classifier::new(
            &classes(&["static", "cpu", "disk"]),
            &[secure, any_tls],
            "static",
        )
        .unwrap();
        let mut f = facts("GET", "/", None, &NoHeaders);
        assert_eq!(c.class(c.classify(&f)).name, "static");
        f.tls = true;
        assert_eq!(c.class(c.classify(&f)).name, "disk");
        f.sni = Some("www.shop.example");
        assert_eq!(c.class(c.classify(&f)).name, "cpu");
        let bad = RuleSpec {
            sni: Some("[".into()),
            ..rule("cpu")
        };
        assert!(matches!(
            Classifier::new(&classes(&["static", "cpu"]), &[bad], "static"),
            Err(ClassifierError::BadGlob { .. })
        ));
    }
}
