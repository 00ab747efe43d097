//! The import graph of `src/` and `crates/`: every module imports only from the layers below
//! it (so there is no circle), and the kernels crate imports nothing of the app.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first. A module may import from its own layer's modules only through the lower
/// ones: same-layer imports are refused too, which keeps each layer's modules independent.
const LAYERS: &[&[&str]] = &[
    &["clock", "host", "record", "stats"],
    &["board", "models"],
    &["config"],
    &["memory", "power", "provenance", "train"],
    &["store"],
    &["render"],
    &["workloads"],
    &["plan", "worker"],
    &["runner", "report", "sync"],
    &["daemon"],
    &["main", "cli"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code outside the unit tests at the end of a file (tests may reach anywhere).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The first path segments after each `prefix` (e.g. `crate::` -> `store`), comments included:
/// a doc link to a higher layer is a dependency of the reader too.
fn targets(code: &str, prefix: &str) -> BTreeSet<String> {
    code.match_indices(prefix)
        .filter(|(i, _)| {
            // `edgebench::` inside `edgebench_kernels::` or an identifier is not ours.
            !code[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(i, _)| {
            code[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|t| !t.is_empty())
        .collect()
}

#[test]
fn app_modules_import_only_from_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let own = layer(&module).unwrap_or_else(|| {
            panic!(
                "{}: module `{module}` has no layer in LAYERS",
                rel.display()
            )
        });
        let code = code_of(file);
        let prefix = if own == LAYERS.len() - 1 {
            "edgebench::"
        } else {
            "crate::"
        };
        for target in targets(&code, prefix) {
            if target == module || (own == LAYERS.len() - 1 && LAYERS[own].contains(&&*target)) {
                continue;
            }
            match layer(&target) {
                Some(l) if l < own => {}
                _ => wrong.push(format!("{} imports `{target}`", rel.display())),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports from the same or a higher layer:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_kernels_crate_imports_nothing_of_the_app() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/edgebench-kernels");
    let mut files = Vec::new();
    rust_files(&dir.join("src"), &mut files);
    assert!(!files.is_empty());
    for file in files {
        let code = std::fs::read_to_string(&file).unwrap();
        assert!(
            targets(&code, "edgebench::").is_empty(),
            "{} imports the app",
            file.display()
        );
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("edgebench ="),
        "the kernels crate depends on the app"
    );
}

#[test]
fn the_import_scan_sees_what_it_must() {
    let code = "use crate::store::Store; // crate::runner\nedgebench_kernels::conv; x_crate::y";
    let found = targets(code, "crate::");
    assert_eq!(
        found,
        ["runner", "store"].map(String::from).into_iter().collect()
    );
    assert!(targets("edgebench_kernels::conv", "edgebench::").is_empty());
}
