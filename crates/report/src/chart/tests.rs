use super::*;

/// A small XML checker: every tag closes in order, attributes are quoted, no bare `&` or `<`.
fn assert_well_formed(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg.trim_start();
    if rest.starts_with("<?xml") {
        rest = &rest[rest.find("?>").expect("xml decl closes") + 2..];
    }
    let mut text = String::new();
    while let Some(lt) = rest.find('<') {
        text.push_str(&rest[..lt]);
        let gt = rest[lt..].find('>').expect("tag closes") + lt;
        let tag = &rest[lt + 1..gt];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "closing tag out of order"
            );
        } else if !tag.starts_with('!') {
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body
                .split_whitespace()
                .next()
                .expect("tag name")
                .to_string();
            assert_eq!(
                body.matches('"').count() % 2,
                0,
                "unbalanced quotes in <{tag}>"
            );
            for attr in body.split_whitespace().skip(1).filter(|a| a.contains('=')) {
                let v = attr.split_once('=').unwrap().1;
                assert!(
                    v.starts_with('"') || v.starts_with('\''),
                    "unquoted attribute in <{tag}>"
                );
            }
            if !self_closing {
                stack.push(name);
            }
        }
        rest = &rest[gt + 1..];
    }
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    for (i, _) in text.match_indices('&') {
        let ent = &text[i..];
        assert!(ent.find(';').is_some_and(|e| e < 10), "bare '&' in text");
    }
}

/// How many `<text>` elements read exactly `s` (plotters writes the text on a line of its own).
fn texts(svg: &str, s: &str) -> usize {
    svg.matches(&format!(">\n{s}\n</text>")).count()
}

#[test]
fn twelve_series_get_twelve_direct_labels_and_no_legend() {
    let mut c = Chart::new("twelve", "clients", "conn/s");
    for k in 0..12 {
        let pts = (1..=5).map(|x| (x as f64, (x * (k + 1)) as f64)).collect();
        c.add(Series::new(format!("policy-{k:02}"), pts).with_ci(vec![1.0; 5]));
    }
    let svg = c.svg().unwrap();
    assert_well_formed(&svg);
    for k in 0..12 {
        assert_eq!(texts(&svg, &format!("policy-{k:02}")), 1, "label {k}");
    }
    // Twelve distinct colours.
    let mut colours: Vec<_> = palette::PALETTE.iter().map(|c| (c.0, c.1, c.2)).collect();
    colours.dedup();
    assert_eq!(colours.len(), 12);
}

#[test]
fn error_bars_are_drawn_only_where_there_is_an_interval() {
    let with = Chart::new("t", "x", "y")
        .with(Series::new("a", vec![(1.0, 5.0), (2.0, 6.0)]).with_ci(vec![1.0, 0.0]));
    let without = Chart::new("t", "x", "y").with(Series::new("a", vec![(1.0, 5.0), (2.0, 6.0)]));
    let (a, b) = (with.svg().unwrap(), without.svg().unwrap());
    // One bar = the bar and two caps.
    assert_eq!(
        a.matches("<polyline").count(),
        b.matches("<polyline").count() + 3
    );
}

/// An interval wider than the plot stops at its edge, with no cap there (two repetitions give
/// t = 12.7): the bar and only the caps inside the range.
#[test]
fn error_bars_stop_at_the_plot_edges() {
    let bars = |ci: f64| {
        let c = Chart::new("t", "x", "y")
            .y_range(0.0, 10.0)
            .with(Series::new("a", vec![(1.0, 5.0)]).with_ci(vec![ci]));
        let svg = c.svg().unwrap();
        assert_well_formed(&svg);
        svg.matches("<polyline").count()
    };
    let none = Chart::new("t", "x", "y")
        .y_range(0.0, 10.0)
        .with(Series::new("a", vec![(1.0, 5.0)]))
        .svg()
        .unwrap()
        .matches("<polyline")
        .count();
    assert_eq!(bars(1.0), none + 3);
    assert_eq!(bars(20.0), none + 1);
}

#[test]
fn cdf_and_categorical_charts_are_well_formed_and_escape_names() {
    let c = Chart::cdf("CDF <at> 10 & more", "ms", "fraction")
        .with(
            Series::new(
                "a<b & c",
                vec![(0.0, 0.0), (1.0, 0.2), (10.0, 0.9), (100.0, 1.0)],
            )
            .marker(Marker::None),
        )
        .with(Series::new("d", vec![(2.0, 0.5), (50.0, 1.0)]).stroke(Stroke::Dashed));
    let svg = c.svg().unwrap();
    assert_well_formed(&svg);
    assert!(svg.contains("a&lt;b &amp; c"));
    let cat = Chart::new("levels", "delay", "rps")
        .x_categories(vec!["0ms".into(), "100ms".into(), "1s".into()])
        .hline(5.0)
        .with(Series::new(
            "nginx",
            vec![(0.0, 10.0), (1.0, 8.0), (2.0, 3.0)],
        ));
    let svg = cat.svg().unwrap();
    assert_well_formed(&svg);
    assert!(texts(&svg, "100ms") == 1 && texts(&svg, "nginx") == 1);
    assert!(Chart::new("e", "x", "y").svg().is_ok());
}

#[test]
fn a_series_without_a_line_draws_only_its_markers() {
    let pts = vec![(1.0, 1.0), (2.0, 3.0), (3.0, 2.0)];
    let line = Chart::new("l", "x", "y")
        .with(Series::new("ours", pts.clone()).marker(Marker::None))
        .svg()
        .unwrap();
    let points = Chart::new("p", "x", "y")
        .with(
            Series::new("paper", pts)
                .stroke(Stroke::None)
                .marker(Marker::Cross),
        )
        .svg()
        .unwrap();
    assert_well_formed(&points);
    assert_eq!(texts(&points, "paper"), 1, "still named at its end");
    // The line is one polyline through the three points; without it, none is drawn.
    assert!(line.matches("<polyline").count() > points.matches("<polyline").count());
    assert!(points.matches("<line").count() + points.matches("<path").count() > 0);
}
