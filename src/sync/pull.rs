//! `edgebench pull`: results leave the board over the system's ssh.
//!
//! Three ssh calls, so each failure is reported for what it is: `edgebench snapshot` on the
//! board (a consistent copy even while a sweep writes), `cat` of that copy into a local
//! temporary file, `rm` of the remote copy (always attempted). Only a complete download is
//! merged, so a failed transfer leaves the target database as it was. Using the user's ssh
//! keeps their config, keys, agent and jump hosts working.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::store::{self, MergeReport};

/// What to pull and how.
pub struct PullRequest<'a> {
    /// `[user@]board[:remote-db-path]`.
    pub remote: &'a str,
    pub into: &'a Path,
    /// edgebench on the board.
    pub remote_bin: &'a str,
    /// Each passed to ssh as `-o OPTION`.
    pub ssh_opts: &'a [String],
}

/// Where the database lives on the board when the spec names no path (relative to the
/// remote login directory, like `edgebench run`'s default `./edgebench.db`).
pub(crate) const DEFAULT_REMOTE_DB: &str = "edgebench.db";

/// Splits `[user@]board[:path]`.
pub(crate) fn parse_remote(spec: &str) -> anyhow::Result<(&str, &str)> {
    let (dest, path) = match spec.split_once(':') {
        Some((d, p)) if !p.is_empty() => (d, p),
        Some((d, _)) => (d, DEFAULT_REMOTE_DB),
        None => (spec, DEFAULT_REMOTE_DB),
    };
    if dest.is_empty() || dest.starts_with('-') || dest.ends_with('@') {
        bail!("{spec:?} is not [user@]board[:remote-db-path]; e.g. nvidia@tx2:edgebench.db");
    }
    Ok((dest, path))
}

/// Quotes a word for the remote POSIX shell; a leading `~/` stays unquoted so it expands.
pub(crate) fn shell_quote(word: &str) -> String {
    let (home, rest) = match word.strip_prefix("~/") {
        Some(rest) => ("~/", rest),
        None => ("", word),
    };
    format!("{home}'{}'", rest.replace('\'', r"'\''"))
}

struct Ssh<'a> {
    program: String,
    pre_args: Vec<String>,
    opts: &'a [String],
    dest: &'a str,
}

impl Ssh<'_> {
    fn command(&self, remote_cmd: &str) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.pre_args);
        for o in self.opts {
            c.arg("-o").arg(o);
        }
        c.arg("--").arg(self.dest).arg(remote_cmd);
        c
    }
}

/// Removes the board's temporary snapshot however the pull ends.
struct RemoteTemp<'a> {
    ssh: &'a Ssh<'a>,
    path: String,
}

impl Drop for RemoteTemp<'_> {
    fn drop(&mut self) {
        let r = self
            .ssh
            .command(&format!("rm -f {}", shell_quote(&self.path)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(r, Ok(s) if s.success()) {
            tracing::warn!(path = %self.path, "could not remove the snapshot on the board");
        }
    }
}

/// Pulls one board's database and merges it into `req.into`.
pub fn pull(req: &PullRequest<'_>) -> anyhow::Result<MergeReport> {
    let (dest, remote_db) = parse_remote(req.remote)?;
    // EDGEBENCH_SSH: the ssh command, with arguments (e.g. "ssh -F ./ssh_config").
    let ssh_cmd = std::env::var("EDGEBENCH_SSH").unwrap_or_else(|_| "ssh".into());
    let mut words = ssh_cmd.split_whitespace().map(String::from);
    let program = words.next().unwrap_or_else(|| "ssh".into());
    let ssh = Ssh {
        program,
        pre_args: words.collect(),
        opts: req.ssh_opts,
        dest,
    };

    let remote_tmp = format!("/tmp/edgebench-pull-{}.db", uuid::Uuid::new_v4());
    eprintln!("[1/3] {dest}: snapshot of {remote_db}");
    let guard = RemoteTemp {
        ssh: &ssh,
        path: remote_tmp.clone(),
    };
    let out = ssh
        .command(&format!(
            "{} -q snapshot {} --db {}",
            shell_quote(req.remote_bin),
            shell_quote(&remote_tmp),
            shell_quote(remote_db)
        ))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {:?}; is ssh installed?", ssh.program))?;
    if !out.status.success() {
        bail!(
            "snapshot on {dest} failed ({}): {}; {} is left as it was",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            req.into.display()
        );
    }

    let dir = req
        .into
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let local = tempfile::Builder::new()
        .prefix(".edgebench-pull-")
        .suffix(".db")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    eprintln!("[2/3] {dest}: copying {remote_tmp}");
    download(&ssh, &remote_tmp, local.as_file()).with_context(|| {
        format!(
            "copying the snapshot from {dest} failed; {} is left as it was",
            req.into.display()
        )
    })?;
    drop(guard);

    eprintln!("[3/3] merging into {}", req.into.display());
    let report = store::merge(&[local.path().to_path_buf()], req.into)
        .with_context(|| format!("merging the snapshot pulled from {dest}"))?;
    Ok(report)
}

fn download(ssh: &Ssh<'_>, remote: &str, file: &std::fs::File) -> anyhow::Result<()> {
    let mut child = ssh
        .command(&format!("cat {}", shell_quote(remote)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {:?}", ssh.program))?;
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("      {bytes} copied ({bytes_per_sec})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let mut stdout = child.stdout.take().context("ssh stdout")?;
    let mut writer = std::io::BufWriter::new(file);
    let mut buf = vec![0u8; 1 << 16];
    let copied = (|| -> std::io::Result<()> {
        loop {
            let n = stdout.read(&mut buf)?;
            if n == 0 {
                break;
            }
            writer.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
        writer.flush()?;
        writer.get_ref().sync_all()
    })();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait()?;
    bar.finish_and_clear();
    copied.context("writing the local copy")?;
    if !status.success() {
        bail!("ssh cat exited with {status}: {}", err.trim());
    }
    eprintln!("      {} bytes copied", bar.position());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_remote_specs() {
        assert_eq!(parse_remote("tx2").unwrap(), ("tx2", DEFAULT_REMOTE_DB));
        assert_eq!(
            parse_remote("nv@tx2:/data/e.db").unwrap(),
            ("nv@tx2", "/data/e.db")
        );
        assert_eq!(
            parse_remote("nv@tx2:").unwrap(),
            ("nv@tx2", DEFAULT_REMOTE_DB)
        );
        assert!(parse_remote("-oProxyCommand=x").is_err());
        assert!(parse_remote(":x.db").is_err());
    }

    #[test]
    fn quotes_for_the_remote_shell() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("~/e.db"), "~/'e.db'");
    }
}
