//! The `file` kind's keys: the path of a `.json` or `.toml` list of nodes.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::entry::Located;

/// The file to watch: a `.json` or `.toml` path, relative ones taken from the config's folder.
pub(super) fn resolve(file: &Spanned<String>, base_dir: Option<&Path>) -> Result<PathBuf, Located> {
    let path = Path::new(file.get_ref());
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(extension, "json" | "toml") {
        return Err((
            Some(file.span()),
            format!(
                "discovery: `{}` must end in .json or .toml (that is how it is read)",
                file.get_ref()
            ),
        ));
    }
    Ok(match base_dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    })
}
