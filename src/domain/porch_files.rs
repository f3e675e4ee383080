//! Test support: Porch's own deployment files, which this repository does
//! not ship. The tests read them at run time from the folder
//! `KRM_FN_PORCH_DEPLOY` names (`head/` and `config-yaml-era/`, as in CI's
//! shared fixtures) and skip when it is unset or absent.

use std::path::Path;

/// The variable naming the folder of Porch's deployment files.
const VAR: &str = "KRM_FN_PORCH_DEPLOY";

/// The text of `path` (e.g. `head/23-function-configurations.yaml`) under
/// `KRM_FN_PORCH_DEPLOY`, or `None` after a message on stderr naming the
/// variable when it is unset or names no folder: the caller skips. A
/// folder without the file is a broken copy and panics.
pub(crate) fn read(path: &str) -> Option<String> {
    let Some(root) = std::env::var_os(VAR) else {
        eprintln!(
            "skipped: {VAR} is not set; point it at a folder of Porch's deployment files (head/, config-yaml-era/) to read {path}"
        );
        return None;
    };
    let root = Path::new(&root);
    if !root.is_dir() {
        eprintln!(
            "skipped: {VAR}={} is not a folder; point it at Porch's deployment files (head/, config-yaml-era/) to read {path}",
            root.display()
        );
        return None;
    }
    let file = root.join(path);
    Some(
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} ({VAR} lacks Porch's {path})", file.display())),
    )
}
