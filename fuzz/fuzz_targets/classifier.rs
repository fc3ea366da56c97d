//! The classifier: rules as an operator writes them (glob, regex, extension, header glob) and
//! requests as a client sends them. Any rule compiles or gives an error; a compiled rule
//! classifies any request without a panic, and a request no rule can match falls to the default.
#![no_main]

use capstan_core::class::{ClassSpec, Classifier, HeaderLookup, RequestFacts, RuleSpec};
use libfuzzer_sys::fuzz_target;

struct OneHeader<'a>(&'a str, &'a str);

impl HeaderLookup for OneHeader<'_> {
    fn header(&self, lower_case_name: &str) -> Option<&str> {
        (self.0.eq_ignore_ascii_case(lower_case_name)).then_some(self.1)
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Fields separated by NUL: glob, regex, extension, header name, header glob, SNI glob, then
    // the request's method, path, query, header name and value, and SNI name (TLS when given).
    let mut f = text.split('\0');
    let mut next = || f.next().unwrap_or("");
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let rule = RuleSpec {
        class: "hit".into(),
        glob: some(next()),
        regex: some(next()),
        extension: some(next()).map(|e| vec![e]),
        header: some(next()),
        header_value: some(next()),
        sni: some(next()),
        ..RuleSpec::default()
    };
    let (method, path, query, name, value) = (next(), next(), next(), next(), next());
    let sni = some(next());
    let classes = ["default", "hit"].map(|name| ClassSpec {
        name: name.into(),
        profile: Default::default(),
    });
    let query = some(query);
    let req = RequestFacts {
        method,
        path,
        query: query.as_deref(),
        headers: &OneHeader(name, value),
        tls: sni.is_some(),
        sni: sni.as_deref(),
    };
    let defaults = Classifier::cap_defaults();
    let _ = defaults.class(defaults.classify(&req));
    if let Ok(classifier) = Classifier::new(&classes, &[rule], "default") {
        let id = classifier.classify(&req);
        assert!(id < classifier.classes().len());
    }
});
