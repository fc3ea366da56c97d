//! HTML for the reports: escaping, the page skeleton every report starts from (head, the one
//! style sheet, title, run information) and tables whose cells are escaped.

use std::fmt;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

/// The style sheet of every report: numbers right-aligned, the first column (names) and cells
/// of class `l` left-aligned, warnings orange-brown, verdicts green.
pub const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
h1{font-size:150%}h2{font-size:125%;margin-top:1.6em}\
table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}\
th{background:#f3f3f3}td:first-child,th:first-child,td.l,th.l{text-align:left}tr:nth-child(even) td{background:#fafafa}\
.warn{color:#a40}.ok{color:#060}code,pre{background:#f6f6f6;padding:2px 4px}\
p.run{font-size:90%;color:#444}svg{max-width:100%;height:auto;display:block;margin:1em 0}";

/// A report page under construction. `Page::new` writes the head and the `<h1>`; push sections
/// with [`Page::push`] or `write!`; [`Page::finish`] closes it.
pub struct Page {
    html: String,
}

impl Page {
    /// The page's `<title>` and its `<h1>` (both escaped here).
    pub fn new(title: &str, heading: &str) -> Page {
        Page::with_style(title, heading, "")
    }

    /// As [`Page::new`], with CSS added after the common style sheet.
    pub fn with_style(title: &str, heading: &str, extra_css: &str) -> Page {
        Page {
            html: format!(
                "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title>\
                 <style>{STYLE}{extra_css}</style></head><body><h1>{}</h1>",
                escape(title),
                escape(heading)
            ),
        }
    }

    /// The run's facts as one paragraph: `name: value` lines (both escaped).
    pub fn run_info(&mut self, items: &[(&str, String)]) {
        let lines: Vec<String> = items
            .iter()
            .map(|(k, v)| format!("<b>{}:</b> {}", escape(k), escape(v)))
            .collect();
        self.html.push_str("<p class=\"run\">");
        self.html.push_str(&lines.join("<br>"));
        self.html.push_str("</p>");
    }

    /// Raw HTML (already escaped by the caller).
    pub fn push(&mut self, html: &str) {
        self.html.push_str(html);
    }

    /// Raw HTML, as `String::push_str` (so a report built on a `String` moves over unchanged).
    pub fn push_str(&mut self, html: &str) {
        self.html.push_str(html);
    }

    /// A `<h2>` (escaped).
    pub fn section(&mut self, heading: &str) {
        self.html.push_str("<h2>");
        self.html.push_str(&escape(heading));
        self.html.push_str("</h2>");
    }

    /// A list of sentences (escaped).
    pub fn list<S: AsRef<str>>(&mut self, items: &[S]) {
        self.html.push_str("<ul>");
        for i in items {
            self.html.push_str("<li>");
            self.html.push_str(&escape(i.as_ref()));
            self.html.push_str("</li>");
        }
        self.html.push_str("</ul>");
    }

    /// Closes the page.
    pub fn finish(mut self) -> String {
        self.html.push_str("</body></html>\n");
        self.html
    }
}

impl fmt::Write for Page {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.html.push_str(s);
        Ok(())
    }
}

/// A table: a header row and body rows. [`Table::row`] escapes its cells; [`Table::row_html`]
/// takes cells that are HTML already (links, `<small>`, warnings).
pub struct Table {
    html: String,
}

impl Table {
    /// Header cells (escaped).
    pub fn new<S: AsRef<str>>(head: &[S]) -> Table {
        let mut html = String::from("<table><tr>");
        for h in head {
            html.push_str("<th>");
            html.push_str(&escape(h.as_ref()));
            html.push_str("</th>");
        }
        html.push_str("</tr>");
        Table { html }
    }

    /// A row of text cells, escaped.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.row_html(cells.into_iter().map(|c| escape(c.as_ref())))
    }

    /// A row of cells that are HTML already.
    pub fn row_html<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.html.push_str("<tr>");
        for c in cells {
            self.html.push_str("<td>");
            self.html.push_str(c.as_ref());
            self.html.push_str("</td>");
        }
        self.html.push_str("</tr>");
        self
    }

    pub fn finish(mut self) -> String {
        self.html.push_str("</table>");
        self.html
    }
}

/// `value ± ci95` with `digits` decimals; just the value when there is no interval.
pub fn with_ci(value: f64, ci95: f64, digits: usize) -> String {
    if ci95 > 0.0 {
        format!("{value:.digits$} ± {ci95:.digits$}")
    } else {
        format!("{value:.digits$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            escape(r#"<a href="x">Tom & Jerry's</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#x27;s&lt;/a&gt;"
        );
        assert_eq!(escape("plain ± µs"), "plain ± µs");
    }

    #[test]
    fn tables_escape_text_cells_but_not_html_cells() {
        let mut t = Table::new(&["policy", "p90 <ms>"]);
        t.row(["<script>", "1.0"]);
        t.row_html(["<b>cap</b>", "2.0"]);
        let h = t.finish();
        assert!(h.contains("<th>p90 &lt;ms&gt;</th>"));
        assert!(h.contains("<td>&lt;script&gt;</td>"));
        assert!(h.contains("<td><b>cap</b></td>"));
        assert_eq!(h.matches("<tr>").count(), 3);
    }

    #[test]
    fn a_page_has_head_style_title_and_run_info() {
        let mut p = Page::new("capstan x: a&b", "a&b");
        p.run_info(&[("Command", "capstan x --y <z>".into())]);
        p.list(&["one < two"]);
        let h = p.finish();
        assert!(h.starts_with("<!doctype html><html><head><meta charset=\"utf-8\"><title>capstan x: a&amp;b</title><style>"));
        assert!(h.contains("<b>Command:</b> capstan x --y &lt;z&gt;"));
        assert!(h.contains("<li>one &lt; two</li>"));
        assert!(h.ends_with("</body></html>\n"));
        assert_eq!(with_ci(1.234, 0.5, 1), "1.2 ± 0.5");
        assert_eq!(with_ci(1.234, 0.0, 1), "1.2");
    }
}
