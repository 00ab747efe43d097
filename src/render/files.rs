//! Files of a report: names made safe for a file system, and writes that a reader never sees
//! half done.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Writes `contents` to a temporary file beside `path`, then renames it into place, so a
/// reader never sees a half-written file.
pub(crate) fn write_atomic(path: &Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let write = || -> std::io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        // The mode a plain create gives (0666 less the umask), not the temporary file's 0600:
        // the report is read by others too (a web server, a colleague).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let mut tmp = builder.tempfile_in(dir)?;
        tmp.write_all(contents.as_ref())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().with_context(|| format!("cannot write {}", path.display()))
}

/// The longest name [`replace_unsafe`] gives, in bytes: a part of a file name, well within the
/// 255 bytes a file system allows, with room for what is added around it.
pub(crate) const MAX_NAME_PART: usize = 100;

/// `text` with every character other than ASCII letters, digits and `allowed` replaced by `_`,
/// for a file name. A longer one than [`MAX_NAME_PART`] keeps its start and ends in a hash of
/// the whole, so that two long names that differ only in their end stay apart.
pub(crate) fn replace_unsafe(text: &str, allowed: &str) -> String {
    let safe: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || allowed.contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.len() <= MAX_NAME_PART {
        return safe;
    }
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    // Every character of `safe` is ASCII.
    format!("{}-{hash:016x}", &safe[..MAX_NAME_PART - 17])
}

/// A host name as a directory/file name.
pub fn safe_name(host: &str) -> String {
    let s = replace_unsafe(host, "-_");
    if s.is_empty() || s == "compare" {
        format!("host_{s}")
    } else {
        s
    }
}

/// An engine's name as part of a file name: characters other than letters, digits, `-`, `_`
/// and `.` become `_`.
pub(crate) fn file_name_part(engine: &str) -> String {
    let s = replace_unsafe(engine, "-_.");
    match s.trim_start_matches('.') {
        "" => format!("engine_{}", s.len()),
        t => t.to_string(),
    }
}

/// `files` less those holding a header line only (a workload or engine without trials), which
/// are removed: the report shows no table without rows.
pub(crate) fn without_empty_files(files: Vec<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        if text.lines().nth(1).is_some() {
            out.push(f);
        } else {
            std::fs::remove_file(&f)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_the_file_whole_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.csv");
        write_atomic(&path, "one").unwrap();
        write_atomic(&path, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let plain = dir.path().join("plain");
            std::fs::write(&plain, "").unwrap();
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
            assert_eq!(mode(&path), mode(&plain), "the mode a plain create gives");
        }
    }

    #[test]
    fn names_keep_letters_digits_and_what_is_allowed() {
        assert_eq!(safe_name("tx1 board/2"), "tx1_board_2");
        assert_eq!(safe_name("compare"), "host_compare");
        assert_eq!(file_name_part("..caffe 1.0"), "caffe_1.0");
        assert_eq!(file_name_part(".."), "engine_2");
        let long = |end: &str| format!("{}{end}", "é".repeat(100_000));
        let (a, b) = (safe_name(&long("a")), safe_name(&long("b")));
        assert_eq!(a.len(), MAX_NAME_PART);
        assert_ne!(a, b);
        assert_eq!(a, safe_name(&long("a")));
    }
}
