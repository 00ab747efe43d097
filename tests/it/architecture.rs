//! The import graph of `src/` and `crates/`: every top-level module imports only from the
//! layers below it (so there is no circle), the kernels crate imports nothing of the app, and
//! inside every directory module (and every crate root under `crates/`) the child modules'
//! imports of each other form no circle either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom first. A module may import from its own layer's modules only through the lower
/// ones: same-layer imports are refused too, which keeps each layer's modules independent.
/// A module named here that `src/` does not have is simply not checked.
const LAYERS: &[&[&str]] = &[
    &["clock", "host", "record", "stats", "text"],
    &["board", "models"],
    &["config"],
    &["memory", "power", "provenance", "train"],
    &["metrics"],
    &["store"],
    &["render"],
    &["workloads"],
    &["plan", "worker"],
    &["runner", "report", "sync"],
    &["daemon"],
    &["main", "cli", "cmd", "fuzz", "testkit"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The Rust files under `dir`, except unit-test modules in files of their own (`tests.rs`,
/// declared `#[cfg(test)] mod tests;`): tests may reach anywhere.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            // Unit tests, and a workload's integration tests (`it.rs`, of the `it` binary).
            && path.file_name().is_some_and(|n| n != "tests.rs" && n != "it.rs")
        {
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

/// What each byte of a source file is, for the module-level scan.
#[derive(Clone, Copy, PartialEq)]
enum Class {
    Code,
    Comment,
    Str,
}

/// Where the hashes of a raw string (`r"..."`, `r#"..."#`, `br"..."`) starting at `i` begin,
/// and how many there are; None if none starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if i > 0 && ident(b[i - 1]) {
        return None;
    }
    let r = i + match b.get(i..i + 2)? {
        [b'r', _] => 1,
        b"br" => 2,
        _ => return None,
    };
    let hashes = b[r..].iter().take_while(|&&c| c == b'#').count();
    (b.get(r + hashes) == Some(&b'"')).then_some((r, hashes))
}

/// Classifies every byte of `text` as code, comment or string/char literal (its quotes
/// included), so that braces and `mod` are only read in code and paths not in literals.
fn classify(text: &str) -> Vec<Class> {
    let b = text.as_bytes();
    let mut class = vec![Class::Code; b.len()];
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let kind = if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            Class::Comment
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            Class::Comment
        } else if let Some((r, hashes)) = raw_string_at(b, i) {
            // Ended by the quote and as many hashes as it began with.
            let end = format!("\"{}", "#".repeat(hashes));
            i = r + hashes + 1;
            match text[i..].find(&end) {
                Some(k) => i += k + end.len(),
                None => i = b.len(),
            }
            Class::Str
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            Class::Str
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '"') or a lifetime ('a), told apart by what
            // follows the first character.
            let next = text[i + 1..].chars().next().map_or(0, char::len_utf8);
            if b.get(i + 1) == Some(&b'\\') {
                // Past the escaped character, which may itself be a quote ('\'').
                i += 3;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                Class::Str
            } else if b.get(i + 1 + next) == Some(&b'\'') {
                i += next + 2;
                Class::Str
            } else {
                i += 1;
                Class::Code
            }
        } else {
            i += 1;
            Class::Code
        };
        let end = i.min(b.len());
        class[start..end].fill(kind);
        i = end;
    }
    class
}

/// The inline modules of a file: name and byte range of the body, and whether it is test-only
/// (`#[cfg(test)]`, alone or in `all(..)`), found in code only.
fn inline_modules(text: &str, class: &[Class]) -> Vec<(String, usize, usize, bool)> {
    let b = text.as_bytes();
    let code = |i: usize| class[i] == Class::Code;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut found = Vec::new();
    for (at, _) in text.match_indices("mod") {
        let bounded = (at == 0 || !ident(b[at - 1]))
            && b.get(at + 3).is_some_and(|c| c.is_ascii_whitespace());
        if !bounded || !code(at) {
            continue;
        }
        let mut i = at + 3;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let name_start = i;
        while i < b.len() && ident(b[i]) {
            i += 1;
        }
        let name = &text[name_start..i];
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if name.is_empty() || b.get(i) != Some(&b'{') {
            continue; // `mod x;`: its own file.
        }
        let open = i;
        let mut depth = 0usize;
        let mut close = b.len();
        for (j, &c) in b.iter().enumerate().skip(open) {
            if !code(j) {
                continue;
            }
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        // The item's attributes: the code between the end of the previous item and `mod`.
        let item_start = (0..at)
            .rev()
            .find(|&j| code(j) && matches!(b[j], b';' | b'{' | b'}'))
            .map_or(0, |j| j + 1);
        let attrs: String = (item_start..at)
            .filter(|&j| code(j))
            .map(|j| b[j] as char)
            .filter(|c| !c.is_whitespace())
            .collect();
        let test_only = attrs.contains("#[cfg(test)]") || attrs.contains("#[cfg(all(test");
        found.push((name.to_string(), open, close, test_only));
    }
    found
}

/// The paths a `use` tree or path starting at `text[*i..]` names, segment by segment:
/// `super::{a, b::{c, D}}` gives `super::a`, `super::b::c`, `super::b::D`; `self` inside a
/// group stands for the group's own prefix and `x as y` for `x`.
fn use_tree(text: &str, i: &mut usize) -> Vec<Vec<String>> {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let skip_space = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    let word = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && ident(b[*i]) {
            *i += 1;
        }
        text[start..*i].to_string()
    };
    let mut prefix = Vec::new();
    loop {
        if b.get(*i) == Some(&b'{') {
            *i += 1;
            let mut paths = Vec::new();
            loop {
                skip_space(i);
                if b.get(*i) == Some(&b'}') || *i >= b.len() {
                    *i += 1;
                    break;
                }
                for sub in use_tree(text, i) {
                    let mut path = prefix.clone();
                    path.extend(sub.into_iter().filter(|s| s != "self"));
                    paths.push(path);
                }
                skip_space(i);
                match b.get(*i) {
                    Some(b',') => *i += 1,
                    Some(b'}') => {}
                    // Not a use tree after all (a `{` in a comment, a macro): stop here.
                    _ => break,
                }
            }
            return paths;
        }
        let segment = word(i);
        if segment.is_empty() {
            // A glob names its prefix; anything else ends the path.
            if b.get(*i) == Some(&b'*') {
                *i += 1;
            }
            break;
        }
        prefix.push(segment);
        if text[*i..].starts_with("::") {
            *i += 2;
            continue;
        }
        let mut j = *i;
        skip_space(&mut j);
        if text[j..].starts_with("as") && b.get(j + 2).is_some_and(|c| c.is_ascii_whitespace()) {
            j += 2;
            skip_space(&mut j);
            word(&mut j);
            *i = j;
        }
        break;
    }
    vec![prefix]
}

/// The absolute module path (below the crate root) that `path`, written in module `module`,
/// starts with: `crate::`, `self::` and `super::` resolved. None for other paths, and for a
/// `super` above the crate root.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module.split_last()?.1.to_vec(),
        _ => return None,
    };
    let mut rest = rest.iter().peekable();
    while rest.next_if(|s| *s == "super").is_some() {
        base.pop()?;
    }
    base.extend(rest.filter(|s| *s != "self").cloned());
    Some(base)
}

/// Every module path one file's code names (outside test-only inline modules), resolved, with
/// the line it is on. `module` is the file's own module path; inline modules extend it.
/// Comments count (a doc link is a dependency of the reader); string literals do not.
fn named_paths(text: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let class = classify(text);
    let mods = inline_modules(text, &class);
    let b = text.as_bytes();
    let mut out = Vec::new();
    for keyword in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(keyword) {
            // `super::super::x` is read from its first `super`; `$crate` is a macro's.
            let inside_path = at > 0
                && (b[at - 1].is_ascii_alphanumeric() || matches!(b[at - 1], b'_' | b'$' | b':'));
            if inside_path || class[at] == Class::Str {
                continue;
            }
            if mods.iter().any(|m| m.3 && m.1 < at && at < m.2) {
                continue;
            }
            let mut here = module.to_vec();
            let mut enclosing: Vec<_> = mods.iter().filter(|m| m.1 < at && at < m.2).collect();
            enclosing.sort_by_key(|m| m.1);
            here.extend(enclosing.iter().map(|m| m.0.clone()));
            let line = text[..at].matches('\n').count() + 1;
            let mut i = at;
            for path in use_tree(text, &mut i) {
                if let Some(resolved) = resolve(&here, &path) {
                    out.push((resolved, line));
                }
            }
        }
    }
    out.sort_by_key(|n| n.1);
    out
}

/// The module path of a file below `root` (a crate's `src/`): `a/b.rs` and `a/b/mod.rs` are
/// `a::b`; `lib.rs` and `main.rs` are the crate root.
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod") || path == ["lib"] || path == ["main"] {
        path.pop();
    }
    path
}

/// A directory module: its folder, its module path, and its children (each `x.rs` but
/// `mod.rs`, each subfolder `x/`; a subfolder's files belong to its child).
struct DirModule {
    dir: PathBuf,
    path: Vec<String>,
    children: BTreeSet<String>,
}

fn dir_module(dir: &Path, path: Vec<String>) -> DirModule {
    let mut children = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() || (p.extension().is_some_and(|e| e == "rs") && name != "mod") {
            children.insert(name);
        }
    }
    if path.is_empty() {
        children.remove("lib");
        children.remove("main");
    }
    DirModule {
        dir: dir.to_path_buf(),
        path,
        children,
    }
}

/// The folders below `dir`, at any depth.
fn subfolders(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.push(p.clone());
            subfolders(&p, out);
        }
    }
}

/// The imports between a directory module's children: (child, sibling) -> where (file:line)
/// the child first names it.
type Imports = BTreeMap<(String, String), String>;

/// For every directory module of the crate whose sources are `root`, the imports between its
/// children. With `crate_root`, the crate root's own children too.
fn child_graphs(root: &Path, crate_root: bool) -> Vec<(DirModule, Imports)> {
    let mut dirs = Vec::new();
    subfolders(root, &mut dirs);
    let mut modules: Vec<DirModule> = dirs
        .iter()
        .map(|d| dir_module(d, module_path(root, &d.join("mod.rs"))))
        .collect();
    if crate_root {
        modules.push(dir_module(root, Vec::new()));
    }
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let named: Vec<_> = files
        .iter()
        .map(|f| {
            let module = module_path(root, f);
            let paths = named_paths(&std::fs::read_to_string(f).unwrap(), &module);
            (f, module, paths)
        })
        .collect();
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    modules
        .into_iter()
        .map(|m| {
            let depth = m.path.len();
            let mut edges = BTreeMap::new();
            for (file, module, paths) in &named {
                let Some(from) = module
                    .get(depth)
                    .filter(|c| module.starts_with(&m.path) && m.children.contains(*c))
                else {
                    continue;
                };
                for (path, line) in paths {
                    let Some(to) = path.get(depth).filter(|_| path.starts_with(&m.path)) else {
                        continue;
                    };
                    if to != from && m.children.contains(to) {
                        let at = file.strip_prefix(base).unwrap_or(file).display();
                        edges
                            .entry((from.clone(), to.clone()))
                            .or_insert_with(|| format!("{at}:{line}"));
                    }
                }
            }
            (m, edges)
        })
        .collect()
}

/// Every elementary circle of a graph, each once: from its smallest node, through larger
/// ones only, back to it.
fn circles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    fn walk(
        edges: &BTreeSet<(String, String)>,
        path: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        let (start, last) = (path[0].clone(), path.last().unwrap().clone());
        for (_, next) in edges.iter().filter(|(a, _)| *a == last) {
            if *next == start {
                let mut circle = path.clone();
                circle.push(start.clone());
                out.push(circle);
            } else if *next > start && !path.contains(next) && out.len() < 1000 {
                path.push(next.clone());
                walk(edges, path, out);
                path.pop();
            }
        }
    }
    let nodes: BTreeSet<&String> = edges.iter().map(|(a, _)| a).collect();
    let mut out = Vec::new();
    for node in nodes {
        walk(edges, &mut vec![node.clone()], &mut out);
    }
    out
}

#[test]
fn no_circle_between_the_child_modules_of_any_module() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut graphs = child_graphs(&base.join("src"), false);
    let mut crates: Vec<_> = std::fs::read_dir(base.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    assert!(!crates.is_empty());
    for src in crates {
        graphs.extend(child_graphs(&src, true));
    }
    graphs.sort_by(|a, b| a.0.dir.cmp(&b.0.dir));
    let mut found = Vec::new();
    let mut used = BTreeMap::new();
    for (module, edges) in &graphs {
        let dir = module.dir.strip_prefix(base).unwrap().display().to_string();
        let pairs: BTreeSet<_> = edges.keys().cloned().collect();
        for circle in circles(&pairs) {
            for pair in circle.windows(2) {
                let edge = (pair[0].clone(), pair[1].clone());
                used.insert(
                    format!("{dir}: {} -> {}", edge.0, edge.1),
                    edges[&edge].clone(),
                );
            }
            found.push(format!("{dir}: {}", circle.join(" -> ")));
        }
    }
    assert!(
        found.is_empty(),
        "circles between child modules:\n{}\nwhere each of their imports is first made:\n{}",
        found.join("\n"),
        used.iter()
            .map(|(edge, at)| format!("{edge}  ({at})"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_module_scan_sees_what_it_must() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let here = s(&["report", "plots"]);
    let code = "use super::{aggregate, summary::{Row, self}};\n\
        use crate::store::Store; // crate::report::csv::x and [`super::models`]\n\
        use super::super::sync as s;\n\
        fn f() { let t = \"crate::report::engines\"; let c = '{'; }\n\
        mod inner { use super::Local; use super::super::build::B; }\n\
        #[cfg(test)]\n\
        mod tests { use super::*; use crate::report::workloads; }\n\
        use super::{*, lock::*};\n\
        macro_rules! m { () => { $crate::report::mod_only::x() }; }\n";
    let named: BTreeSet<Vec<String>> = named_paths(code, &here).into_iter().map(|n| n.0).collect();
    let want: BTreeSet<Vec<String>> = [
        s(&["report", "aggregate"]),
        s(&["report", "summary", "Row"]),
        s(&["report", "summary"]),
        s(&["store", "Store"]),
        s(&["report", "csv", "x"]),
        s(&["report", "models"]),
        s(&["sync"]),
        s(&["report", "plots", "Local"]),
        s(&["report", "build", "B"]),
        s(&["report"]),
        s(&["report", "lock"]),
    ]
    .into_iter()
    .collect();
    assert_eq!(named, want);
    // A crate root's children name each other as `crate::x`; a raw string hides nothing.
    let root = named_paths(
        "use crate::{sgemm, lrn::Lrn};\nconst R: &str = r#\"a\"#; // crate::pool",
        &s(&["conv"]),
    );
    let root: BTreeSet<Vec<String>> = root.into_iter().map(|n| n.0).collect();
    assert_eq!(
        root,
        [s(&["sgemm"]), s(&["lrn", "Lrn"]), s(&["pool"])]
            .into_iter()
            .collect()
    );
    let edges: BTreeSet<(String, String)> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "c")]
            .iter()
            .map(|(x, y)| (x.to_string(), y.to_string()))
            .collect();
    assert_eq!(
        circles(&edges),
        vec![s(&["a", "b", "c", "a"]), s(&["c", "d", "c"])]
    );
}

/// The string literals of `code` compared with something (`== "x"`, `"x" !=`, `.eq("x")`) or
/// matched as a pattern (`"x" =>`, `"x" | "y" =>`), with the line each is on. Raw strings and
/// char literals are not names.
fn compared_literals(code: &str) -> Vec<(String, usize)> {
    let class = classify(code);
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if class[i] != Class::Str {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && class[i] == Class::Str {
            i += 1;
        }
        if b[start] != b'"' || i < start + 2 {
            continue;
        }
        let literal = &code[start + 1..i - 1];
        let before = code[..start].trim_end();
        let after = code[i..].trim_start();
        let compared = before.ends_with("==")
            || before.ends_with("!=")
            || before.ends_with(".eq(")
            || after.starts_with("==")
            || after.starts_with("!=")
            || after.starts_with("=>")
            || (after.starts_with('|') && !after.starts_with("||"));
        if compared {
            let line = code[..start].matches('\n').count() + 1;
            out.push((literal.to_string(), line));
        }
    }
    out
}

#[test]
fn no_workload_name_is_compared_outside_its_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = edgebench::workloads::names();
    assert!(names.len() >= 5, "{names:?}");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let own = rel
            .strip_prefix("workloads")
            .ok()
            .and_then(|r| r.components().next())
            .filter(|_| rel.components().count() > 2)
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        for (literal, line) in compared_literals(&code_of(file)) {
            if names.contains(&literal) && own.as_deref() != Some(literal.as_str()) {
                wrong.push(format!("{}:{line}: \"{literal}\"", rel.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "workload names compared as strings outside their folders (let the workload say \
         what the comparison asks, e.g. in its profile or `names`):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_comparison_scan_sees_what_it_must() {
    let code = "if r.workload == \"mlp\" { }\n\
        match w.as_str() { \"ops\" => 1, \"cnn\" | \"exec\" => 2, _ => 3 }\n\
        let k = WorkloadKind::named(\"idle\"); let u = |_| \"infer\"; // == \"cnn\"\n\
        let e = \"exec\" != x; let q = x.eq(\"cnn\"); let c = '\"'; let r = r#\"ops\"# == y;\n";
    let found: Vec<(String, usize)> = compared_literals(code);
    let want: Vec<(String, usize)> = [
        ("mlp", 1),
        ("ops", 2),
        ("cnn", 2),
        ("exec", 2),
        ("exec", 4),
        ("cnn", 4),
    ]
    .iter()
    .map(|(n, l)| (n.to_string(), *l))
    .collect();
    assert_eq!(found, want);
}

/// Every file under `dir`, tests included.
fn all_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A workload that keeps its end-to-end tests in its folder (`src/workloads/<name>/it.rs`) is
/// whole there: no code or test outside the folder names it but its registration line (its
/// Cargo dependencies, config example and docs aside), as `infer`.
#[test]
fn a_workload_with_its_own_tests_lives_in_its_folder_but_for_its_registration() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let whole: Vec<String> = edgebench::workloads::names()
        .into_iter()
        .filter(|name| {
            root.join("src/workloads")
                .join(name)
                .join("it.rs")
                .is_file()
        })
        .collect();
    let registry = root.join("src/workloads/mod.rs");
    let mut files = Vec::new();
    all_rust_files(&root.join("src"), &mut files);
    all_rust_files(&root.join("tests"), &mut files);
    files.push(root.join("build.rs"));
    let (mut outside, mut registrations) = (Vec::new(), 0);
    for name in &whole {
        let folder = root.join("src/workloads").join(name);
        let naming = [
            format!("{name}::"),
            format!("\"{name}\""),
            format!("mod {name}"),
        ];
        for file in files.iter().filter(|f| !f.starts_with(&folder)) {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                let registration =
                    *file == registry && line.starts_with(&naming[0]) && line.ends_with(',');
                registrations += usize::from(registration);
                if naming.iter().any(|s| line.contains(s.as_str())) && !registration {
                    let rel = file.strip_prefix(root).unwrap();
                    outside.push(format!("{}:{}: {line}", rel.display(), n + 1));
                }
            }
        }
    }
    assert_eq!(
        registrations,
        whole.len(),
        "the scan missed a registration line"
    );
    assert!(
        outside.is_empty(),
        "workloads named outside their folders (let the registry or a workload hook carry \
         it):\n{}",
        outside.join("\n")
    );
}
