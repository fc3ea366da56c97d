//! The paper's claims (`[[paper.claim]]`: one policy x % more conn/s than another at a load
//! level) set beside ours with a 95 % interval, and the verdict the interval gives.
//!
//! Ours comes from pairs of windows at the measured level nearest the paper's: the headline's
//! interleaved rounds where the experiment has them (both windows of a pair ran in the same
//! round, seconds apart), else repetitions of the same index, else one window each. The
//! estimate is [`PairedRatio`]: Student t over the pairs' log ratios. The verdict reads only the
//! interval: "agrees" when the paper's value is inside it, "higher" or "lower" when our whole
//! interval is above or below it, "disagrees" when our whole interval has the opposite sign of
//! the paper's effect, and nothing ("no interval") from a single pair.

use std::fmt::Write as _;

use capstan_report::{escape, PairedRatio};

use crate::model::experiment::Claim;
use crate::model::results::{fmt_level, round, ClaimRow, LabResults, PaperCompare, SeriesResult};

/// What our interval says about the paper's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The paper's value is inside our interval.
    Agrees,
    /// Our whole interval is above the paper's value (the effect is larger here).
    Higher,
    /// Our whole interval is below it.
    Lower,
    /// Our whole interval is on the other side of zero from the paper's effect.
    Disagrees,
    /// One pair of windows: no interval, so no verdict.
    NoInterval,
    /// A policy of the claim was left out.
    NotMeasured,
}

impl Verdict {
    /// The word `results.json` keeps (`paper.claims[].verdict`).
    pub fn key(self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Higher => "higher",
            Verdict::Lower => "lower",
            Verdict::Disagrees => "disagrees",
            Verdict::NoInterval => "no-interval",
            Verdict::NotMeasured => "not-measured",
        }
    }

    /// The verdict in words, for the findings and the report's table.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Agrees => "agrees",
            Verdict::Higher => "higher than the paper",
            Verdict::Lower => "lower than the paper",
            Verdict::Disagrees => "disagrees (opposite direction)",
            Verdict::NoInterval => "no interval: not judged",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// The verdict on the paper's `paper` % given our 95 % interval `[low, high]` (in %), as the
/// module's documentation states it. Opposite sign needs the whole interval past zero; an
/// interval that holds zero but not the paper's value is "higher" or "lower".
pub fn verdict(paper: f64, interval: Option<(f64, f64)>) -> Verdict {
    let Some((low, high)) = interval else {
        return Verdict::NoInterval;
    };
    if low <= paper && paper <= high {
        Verdict::Agrees
    } else if (paper > 0.0 && high < 0.0) || (paper < 0.0 && low > 0.0) {
        Verdict::Disagrees
    } else if paper > high {
        Verdict::Lower
    } else {
        Verdict::Higher
    }
}

/// A ratio as percent more, to 0.1.
fn percent(ratio: f64) -> f64 {
    round(100.0 * (ratio - 1.0), 1)
}

/// The windows of `a` and `b` at `level` paired by repetition (or round) index, and how they
/// were paired: `rounds` when the windows are the headline's, else `repetitions` (or `single`
/// for one pair).
fn pairs(a: &SeriesResult, b: &SeriesResult, level: f64) -> (Vec<(f64, f64)>, &'static str) {
    let mut rounds = true;
    let pairs: Vec<(f64, f64)> = a
        .runs
        .iter()
        .filter(|q| q.level == level)
        .filter_map(|q| {
            let other = b
                .runs
                .iter()
                .find(|o| o.level == level && o.repetition == q.repetition)?;
            rounds &= q.round.is_some() && other.round.is_some();
            Some((q.throughput_rps, other.throughput_rps))
        })
        .collect();
    let pairing = match pairs.len() {
        0 | 1 => "single",
        _ if rounds => "rounds",
        _ => "repetitions",
    };
    (pairs, pairing)
}

/// A claim of the paper beside ours: the estimate over the pairs at the level nearest the
/// paper's, its interval and the verdict (computed from the interval as `results.json` keeps
/// it, to 0.1 %, so a reader can check the rule there).
pub fn claim_row(r: &LabResults, c: &Claim) -> ClaimRow {
    let mut row = ClaimRow {
        text: c.text.clone(),
        paper_percent: c.percent,
        ours_percent: None,
        ours_level: None,
        ours_ci95_low_percent: None,
        ours_ci95_high_percent: None,
        ours_pair_percents: Vec::new(),
        pairing: String::new(),
        verdict: Verdict::NotMeasured.key().into(),
    };
    let a = r.series_named(&c.policy, c.variant.as_deref());
    let b = r.series_named(&c.versus, c.variant.as_deref());
    let (Some(a), Some(b)) = (a, b) else {
        return row;
    };
    let Some(level) = a.nearest(c.at).map(|p| p.level) else {
        return row;
    };
    let (pairs, pairing) = pairs(a, b, level);
    let Some(est) = PairedRatio::of(&pairs) else {
        return row;
    };
    let interval = est.interval.map(|(lo, hi)| (percent(lo), percent(hi)));
    row.ours_percent = Some(percent(est.ratio));
    row.ours_level = Some(level);
    row.ours_ci95_low_percent = interval.map(|i| i.0);
    row.ours_ci95_high_percent = interval.map(|i| i.1);
    row.ours_pair_percents = pairs
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| percent(x / y))
        .collect();
    row.pairing = pairing.into();
    row.verdict = verdict(c.percent, interval).key().into();
    row
}

/// The interval of a claim row, when it has one.
fn interval(c: &ClaimRow) -> Option<(f64, f64)> {
    c.ours_ci95_low_percent.zip(c.ours_ci95_high_percent)
}

/// How the pairs were measured, in words.
fn pairing_words(c: &ClaimRow) -> String {
    let n = c.ours_pair_percents.len();
    match c.pairing.as_str() {
        "rounds" => format!("{n} interleaved rounds"),
        "repetitions" => format!("{n} repetitions, one policy after the other"),
        _ => "one window each".into(),
    }
}

/// Why the verdict is what it is, in a few words.
fn because(c: &ClaimRow, v: Verdict) -> String {
    let p = c.paper_percent;
    let (low, high) = interval(c).unwrap_or((0.0, 0.0));
    let no_difference = low <= 0.0 && high >= 0.0;
    match v {
        Verdict::Agrees => format!("the paper's {p:+.1} % is inside our interval"),
        Verdict::Lower | Verdict::Higher => format!(
            "the paper's {p:+.1} % is {} our interval{}",
            if v == Verdict::Lower { "above" } else { "below" },
            if no_difference {
                ", which includes no difference at all"
            } else {
                ""
            }
        ),
        Verdict::Disagrees => format!("our whole interval is on the other side of zero from the paper's {p:+.1} %"),
        Verdict::NoInterval => "one pair of windows has no interval: [load.headline] rounds or --repetitions 2 or more give one".into(),
        Verdict::NotMeasured => String::new(),
    }
}

/// The verdict a row carries.
fn row_verdict(c: &ClaimRow) -> Verdict {
    match c.verdict.as_str() {
        "agrees" => Verdict::Agrees,
        "higher" => Verdict::Higher,
        "lower" => Verdict::Lower,
        "disagrees" => Verdict::Disagrees,
        "no-interval" => Verdict::NoInterval,
        _ => Verdict::NotMeasured,
    }
}

/// One finding per claim: the paper's value, ours with its interval, the verdict and why.
pub fn findings(pc: &PaperCompare, x: &str) -> Vec<String> {
    pc.claims
        .iter()
        .map(|c| {
            let v = row_verdict(c);
            let (Some(o), Some(l)) = (c.ours_percent, c.ours_level) else {
                return format!(
                    "Paper: {} — not measured in this run (policy left out).",
                    c.text
                );
            };
            let ours = match interval(c) {
                Some((lo, hi)) => format!(
                    "{o:+.1} % (95 % interval {lo:+.1} … {hi:+.1} %, {})",
                    pairing_words(c)
                ),
                None => format!("{o:+.1} % ({})", pairing_words(c)),
            };
            format!(
                "Paper: {} ({:+.1} %). Ours at {} {x}: {ours} — {}: {}.",
                c.text,
                c.paper_percent,
                fmt_level(l),
                v.words(),
                because(c, v)
            )
        })
        .collect()
}

/// Some claim was judged and is not "agrees".
pub fn any_differs(pc: &PaperCompare) -> bool {
    pc.claims.iter().any(|c| {
        matches!(
            row_verdict(c),
            Verdict::Higher | Verdict::Lower | Verdict::Disagrees
        )
    })
}

/// The report's table of claims: the paper's value, ours, our interval and the pairs it is
/// over, the verdict, and each pair's value.
pub fn html(h: &mut String, p: &PaperCompare, x_label: &str) {
    if p.claims.is_empty() {
        return;
    }
    h.push_str(
        "<table><tr><th class=\"l\">claim</th><th>paper</th><th>ours</th><th>95 % interval</th>\
         <th>at</th><th class=\"l\">from</th><th class=\"l\">verdict</th><th class=\"l\">each pair</th></tr>",
    );
    for c in &p.claims {
        let each: Vec<String> = c
            .ours_pair_percents
            .iter()
            .map(|v| format!("{v:+.1}"))
            .collect();
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{:+.1} %</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"l\">{}</td><td class=\"l\"><b>{}</b></td><td class=\"l\"><small>{}</small></td></tr>",
            escape(&c.text),
            c.paper_percent,
            c.ours_percent
                .map(|o| format!("{o:+.1} %"))
                .unwrap_or_else(|| "-".into()),
            interval(c)
                .map(|(lo, hi)| format!("{lo:+.1} … {hi:+.1} %"))
                .unwrap_or_else(|| "-".into()),
            c.ours_level
                .map(|l| format!("{} {}", fmt_level(l), escape(x_label)))
                .unwrap_or_default(),
            escape(&pairing_words(c)),
            escape(row_verdict(c).words()),
            escape(&each.join(", "))
        );
    }
    h.push_str(
        "</table><p><small>Ours: per pair of windows (both policies in the same interleaved round, \
         or the same repetition) the ratio of their conn/s; the geometric mean of the ratios and \
         the 95 % Student-t interval over the pairs' log ratios, as percent more. The verdict \
         reads the interval only: agrees when the paper's value is inside it.</small></p>",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::results::{RunRecord, SeriesResult};

    #[test]
    fn the_verdict_reads_the_interval() {
        let v = |p, lo, hi| verdict(p, Some((lo, hi)));
        assert_eq!(v(27.3, 12.0, 30.0), Verdict::Agrees);
        // Bounds are inside: the interval is closed.
        assert_eq!(v(27.3, 27.3, 30.0), Verdict::Agrees);
        assert_eq!(v(27.3, 10.0, 27.3), Verdict::Agrees);
        assert_eq!(v(27.3, 10.0, 27.2), Verdict::Lower);
        assert_eq!(v(5.1, 6.0, 9.0), Verdict::Higher);
        // Below the paper and holding zero: lower, not "disagrees" (the sign is not known).
        assert_eq!(v(27.3, -3.0, 15.0), Verdict::Lower);
        assert_eq!(v(5.1, -4.0, -0.1), Verdict::Disagrees);
        assert_eq!(v(-8.0, 0.5, 3.0), Verdict::Disagrees);
        // Higher and lower are of the signed value: a stronger negative effect is lower.
        assert_eq!(v(-8.0, -20.0, -9.0), Verdict::Lower);
        assert_eq!(v(-8.0, -7.0, -1.0), Verdict::Higher);
        // The paper saw no difference: agrees when ours may be none either.
        assert_eq!(v(0.0, -2.0, 3.0), Verdict::Agrees);
        assert_eq!(v(0.0, 1.0, 3.0), Verdict::Higher);
        assert_eq!(verdict(27.3, None), Verdict::NoInterval);
    }

    fn series(policy: &str, windows: &[(f64, usize, Option<usize>, f64)]) -> SeriesResult {
        let runs: Vec<RunRecord> = windows
            .iter()
            .map(|&(level, repetition, round, tp)| RunRecord {
                level,
                repetition,
                round,
                throughput_rps: tp,
                ..Default::default()
            })
            .collect();
        SeriesResult {
            label: policy.into(),
            policy: policy.into(),
            variant: None,
            nodes: 4,
            speeds: vec![1.0],
            cores: 1,
            switch_threads: 1,
            points: crate::model::results::points(&[4.0, 10.0], &runs),
            runs,
        }
    }

    fn results(series: Vec<SeriesResult>) -> LabResults {
        let json = serde_json::json!({
            "schema": "capstan-lab/1", "experiment": "t", "title": "t", "figure": "t",
            "about": "", "command": "", "versions": {"capstan": "", "build": "", "os": "",
            "cpus": 1, "rustc": ""}, "quick": false, "seed": 1, "started_unix_ms": 0,
            "wall_s": 0.0, "engine": "closed", "x_label": "clients", "levels": [4.0, 10.0],
            "duration_s": 3.0, "repetitions": 1, "capacity_rps": null, "series": [],
            "paper": null, "findings": [], "warnings": []
        });
        let mut r: LabResults = serde_json::from_value(json).unwrap();
        r.series = series;
        r
    }

    fn claim(at: f64, percent: f64) -> Claim {
        Claim {
            text: "CAP more than RAND".into(),
            policy: "cap".into(),
            versus: "random".into(),
            at,
            percent,
            variant: None,
        }
    }

    #[test]
    fn rounds_are_paired_and_judged() {
        // Three rounds at 10 clients: ratios 1.1, 1.2, 1.3 (Student t: +19.7 % [−2.7, +47.3]),
        // round 2 at twice the conn/s for both (the machine quieter then). One window each at 4.
        let cap = series(
            "cap",
            &[
                (4.0, 0, None, 100.0),
                (10.0, 0, Some(0), 110.0),
                (10.0, 1, Some(1), 120.0),
                (10.0, 2, Some(2), 260.0),
            ],
        );
        let rand = series(
            "random",
            &[
                (4.0, 0, None, 90.0),
                (10.0, 0, Some(0), 100.0),
                (10.0, 1, Some(1), 100.0),
                (10.0, 2, Some(2), 200.0),
            ],
        );
        let r = results(vec![cap, rand]);
        let row = claim_row(&r, &claim(10.0, 27.3));
        assert_eq!(row.pairing, "rounds");
        assert_eq!(row.ours_level, Some(10.0));
        assert_eq!(row.ours_percent, Some(19.7));
        assert_eq!(row.ours_ci95_low_percent, Some(-2.7));
        assert_eq!(row.ours_ci95_high_percent, Some(47.3));
        assert_eq!(row.ours_pair_percents, [10.0, 20.0, 30.0]);
        assert_eq!(row.verdict, "agrees");
        // A paper value past the interval is judged against it, whichever side.
        assert_eq!(claim_row(&r, &claim(10.0, 60.0)).verdict, "lower");
        assert_eq!(claim_row(&r, &claim(10.0, -10.0)).verdict, "higher");
        // One window each: a number, no interval, no verdict.
        let single = claim_row(&r, &claim(4.0, 27.3));
        assert_eq!(single.pairing, "single");
        assert_eq!(single.ours_percent, Some(11.1));
        assert_eq!(single.ours_ci95_low_percent, None);
        assert_eq!(single.verdict, "no-interval");
        let pc = PaperCompare {
            source: String::new(),
            x: String::new(),
            rows: Vec::new(),
            claims: vec![row, single],
            notes: Vec::new(),
            measures: Vec::new(),
            sweb_capacity: None,
        };
        let f = findings(&pc, "clients");
        assert!(
            f[0].contains("+19.7 % (95 % interval -2.7 … +47.3 %, 3 interleaved rounds) — agrees"),
            "{}",
            f[0]
        );
        assert!(f[1].contains("no interval: not judged"), "{}", f[1]);
        assert!(!any_differs(&pc));
    }

    #[test]
    fn a_policy_left_out_is_not_measured() {
        let r = results(vec![series("cap", &[(10.0, 0, None, 100.0)])]);
        let row = claim_row(&r, &claim(10.0, 27.3));
        assert_eq!(row.verdict, "not-measured");
        assert_eq!(row.ours_percent, None);
    }
}
