//! The WebStone file list format (WebStone 2.5 `filelist.standard`, Jones thesis Appendix C):
//!
//! ```text
//! # comment line
//! /file500.html 350 #500
//! /cgi-bin/disk_load.cgi?file=/htdocs/file50k.html 100
//! ```
//!
//! One URL path and one non-negative integer weight per line; `#` at the start of a line or
//! after whitespace starts a comment; blank lines are ignored.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileListEntry {
    pub path: String,
    pub weight: u64,
    /// The comment after the entry, without the `#` (WebStone uses it for the file size).
    pub comment: Option<String>,
    /// 1-based line number in the source text.
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileList {
    pub entries: Vec<FileListEntry>,
}

impl FileList {
    pub fn total_weight(&self) -> u64 {
        self.entries.iter().map(|e| e.weight).sum()
    }
}

impl fmt::Display for FileList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.entries {
            match &e.comment {
                Some(c) => writeln!(f, "{} {} #{}", e.path, e.weight, c)?,
                None => writeln!(f, "{} {}", e.path, e.weight)?,
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct FileListError {
    pub line: usize,
    pub message: String,
}

/// Split off a comment: `#` at the start or after whitespace (a `#` inside a path token, as in a
/// URL fragment, is not a comment).
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return (&line[..i], Some(&line[i + 1..]));
        }
    }
    (line, None)
}

pub fn parse_filelist(text: &str) -> Result<FileList, FileListError> {
    let mut entries = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |message: String| FileListError { line, message };
        let (body, comment) = split_comment(raw);
        let mut tokens = body.split_whitespace();
        let Some(path) = tokens.next() else {
            continue;
        };
        if !path.starts_with('/') {
            return Err(err(format!("path must start with '/', got {path:?}")));
        }
        let weight = match tokens.next() {
            None => return Err(err(format!("missing weight after {path}"))),
            Some(w) => w
                .parse::<u64>()
                .map_err(|_| err(format!("weight must be a non-negative integer, got {w:?}")))?,
        };
        if let Some(extra) = tokens.next() {
            return Err(err(format!(
                "unexpected {extra:?} after the weight (one path and one weight per line)"
            )));
        }
        entries.push(FileListEntry {
            path: path.to_string(),
            weight,
            comment: comment
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty()),
            line,
        });
    }
    if entries.is_empty() {
        return Err(FileListError {
            line: 0,
            message: "the file list has no entries".into(),
        });
    }
    Ok(FileList { entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STANDARD: &str = "# @(#)filelist.standard 1.3
# Filelist for WebStone 2.5 Standard Run Rules, same as filelist.sample
/file500.html 350 #500
/file5k.html 500 #5125
/file50k.html 140 #51250
/file500k.html 9 #512500
/file5m.html 1 #5248000
";

    #[test]
    fn parses_the_thesis_standard_list() {
        let l = parse_filelist(STANDARD).unwrap();
        assert_eq!(l.entries.len(), 5);
        assert_eq!(l.total_weight(), 1000);
        assert_eq!(l.entries[0].path, "/file500.html");
        assert_eq!(l.entries[0].comment.as_deref(), Some("500"));
        assert_eq!(l.entries[0].line, 3);
        // Round trip through the writer.
        assert_eq!(parse_filelist(&l.to_string()).unwrap().entries.len(), 5);
    }

    #[test]
    fn query_strings_and_trailing_comments() {
        let l = parse_filelist(
            "/cgi-bin/cpu_med.cgi 400 # This is the 'cpu heavy' service\n\
             /cgi-bin/disk_load.cgi?file=/home/webston/apache/htdocs/file50k.html 266\n\
             \n   /page.html#frag 3\n",
        )
        .unwrap();
        assert_eq!(l.entries[0].weight, 400);
        assert!(l.entries[1].path.ends_with("file50k.html"));
        assert_eq!(l.entries[2].path, "/page.html#frag");
        assert_eq!(l.entries[2].line, 4);
    }

    #[test]
    fn errors_carry_line_numbers() {
        let e = parse_filelist("/a 1\n\n/b x\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(
            e.to_string(),
            "line 3: weight must be a non-negative integer, got \"x\""
        );
        assert_eq!(parse_filelist("/a\n").unwrap_err().line, 1);
        assert_eq!(parse_filelist("/a 1\nb 2").unwrap_err().line, 2);
        assert_eq!(parse_filelist("/a 1 2").unwrap_err().line, 1);
        assert!(parse_filelist("# only comments\n")
            .unwrap_err()
            .to_string()
            .contains("no entries"));
    }
}
