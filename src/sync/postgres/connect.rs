//! Connecting the way libpq does: a `postgres://` or `postgresql://` URL, what it leaves out
//! from `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`,
//! `PGSSLROOTCERT`, the password file (`PGPASSFILE`, default `~/.pgpass`), and `sslmode`
//! from `disable` to `verify-full` over rustls (ring provider).
//!
//! A password never leaves this module except into the client's connection settings: the
//! [`Target`] shown in messages, logs and the push ledger carries none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> anyhow::Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => bail!(
                "sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, \
                 verify-full"
            ),
        })
    }
}

/// A URL that cannot name a server: bad input (exit 2), told with its password masked.
#[derive(Debug, thiserror::Error)]
#[error("bad PostgreSQL URL {url}: {reason}")]
pub struct BadUrl {
    /// The URL, masked.
    url: String,
    reason: String,
}

/// Where a connection goes, as parsed from the URL and the environment.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub user: String,
    password: Option<String>,
    /// A host name, an IP address, or a directory holding the server's Unix socket.
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<String>,
    pub connect_timeout: Option<Duration>,
    pub application_name: Option<String>,
    /// The password file read, when the password came from one.
    pub passfile: Option<PathBuf>,
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnInfo")
            .field("target", &self.target().0)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("sslmode", &self.sslmode)
            .finish()
    }
}

/// The server as `postgres://USER@HOST:PORT/DB`: no password, no parameters. It names the
/// server in messages and in the push ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target(pub String);

impl Target {
    /// `HOST:PORT/DB`, for "N trials wait to be pushed to ...".
    pub fn short(&self) -> &str {
        short_target(&self.0)
    }
}

/// `HOST:PORT/DB` of a `postgres://USER@HOST:PORT/DB` ledger target.
pub fn short_target(target: &str) -> &str {
    let rest = target
        .strip_prefix("postgres://")
        .or_else(|| target.strip_prefix("postgresql://"))
        .unwrap_or(target);
    rest.rsplit_once('@').map_or(rest, |(_, r)| r)
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The URL with every secret masked (see [`crate::text::mask_url`]), for messages about a URL
/// that may not even parse.
pub fn mask_url(url: &str) -> String {
    crate::text::mask_url(url)
}

#[cfg(test)]
/// Whether a URL carries a password in any form (user-info, `password=` in any case or
/// percent-encoding); `[sync] postgres` refuses one.
pub(crate) fn url_has_password(url: &str) -> bool {
    crate::text::url_has_password(url)
}

fn percent_decode(s: &str) -> anyhow::Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow!("bad percent-encoding at {:?}", &s[i..]))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).context("percent-decoded text is not UTF-8")
}

/// The variables libpq reads, passed in so that tests need not touch the process environment.
pub type Env = HashMap<String, String>;

/// The process environment's `PG*` variables and `HOME`.
pub fn process_env() -> Env {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("PG") || k == "HOME" || k == "USER")
        .collect()
}

impl ConnInfo {
    /// Parses `url` as libpq does and fills what it leaves out from `env`, then the password
    /// file. Errors show the URL with its password masked.
    pub fn parse(url: &str, env: &Env) -> anyhow::Result<ConnInfo> {
        parse_url(url, env)
            .map_err(|e| {
                anyhow::Error::new(BadUrl {
                    url: mask_url(url),
                    reason: format!("{e:#}"),
                })
            })
            .and_then(|mut info| {
                if info.password.is_none() {
                    info.password_from_file(env)?;
                }
                Ok(info)
            })
    }

    pub fn target(&self) -> Target {
        let host = if self.host.contains(':') && !self.host.starts_with('/') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        Target(format!(
            "postgres://{}@{host}:{}/{}",
            self.user, self.port, self.dbname
        ))
    }

    /// The matching line of the password file, if the file may be used (libpq ignores a file
    /// that group or others can read, with a warning).
    fn password_from_file(&mut self, env: &Env) -> anyhow::Result<()> {
        let path = match env.get("PGPASSFILE") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => match env.get("HOME") {
                Some(home) => Path::new(home).join(".pgpass"),
                None => return Ok(()),
            },
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            return Ok(());
        };
        if !meta.is_file() {
            return Ok(());
        }
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "password file {} has group or world access; it is ignored (chmod 0600 {})",
                path.display(),
                path.display()
            );
            return Ok(());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read password file {}", path.display()))?;
        // libpq matches a Unix-socket connection against `localhost`.
        let host = if self.host.starts_with('/') {
            "localhost".to_string()
        } else {
            self.host.clone()
        };
        let port = self.port.to_string();
        if let Some(pw) = pgpass_lookup(&text, &host, &port, &self.dbname, &self.user) {
            self.password = Some(pw);
            self.passfile = Some(path);
        }
        Ok(())
    }

    /// The client's settings (with the password).
    fn client_config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.user(&self.user).dbname(&self.dbname).port(self.port);
        if self.host.starts_with('/') {
            c.host_path(&self.host);
        } else {
            c.host(&self.host);
        }
        if let Some(pw) = &self.password {
            c.password(pw);
        }
        if let Some(t) = self.connect_timeout {
            c.connect_timeout(t);
        }
        c.application_name(self.application_name.as_deref().unwrap_or("edgebench"));
        c.ssl_mode(match self.sslmode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        });
        c
    }

    /// The TLS settings `sslmode` asks for; `None` for `disable`.
    fn tls(&self, env: &Env) -> anyhow::Result<Option<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .context("TLS setup")?;
        let config = match self.sslmode {
            SslMode::Disable => return Ok(None),
            // Encryption without authentication, as libpq does for these modes.
            SslMode::Allow | SslMode::Prefer | SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                .with_no_client_auth(),
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let roots = Arc::new(self.root_store(env)?);
                let webpki =
                    rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                        .build()
                        .context("TLS certificate verifier")?;
                if self.sslmode == SslMode::VerifyFull {
                    builder.with_webpki_verifier(webpki).with_no_client_auth()
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                        .with_no_client_auth()
                }
            }
        };
        Ok(Some(config))
    }

    /// `sslrootcert` (default `~/.postgresql/root.crt`; `system`: the system's roots).
    fn root_store(&self, env: &Env) -> anyhow::Result<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        let file = match self.sslrootcert.as_deref() {
            Some("system") => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    // A system store may hold certificates rustls cannot parse; skip those.
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    bail!("sslrootcert=system: no usable certificates in the system's store");
                }
                return Ok(roots);
            }
            Some(path) => PathBuf::from(path),
            None => match env.get("HOME") {
                Some(home) => Path::new(home).join(".postgresql/root.crt"),
                None => bail!(
                    "sslmode={} needs a root certificate: set sslrootcert or PGSSLROOTCERT",
                    self.sslmode_name()
                ),
            },
        };
        let pem = std::fs::read(&file).with_context(|| {
            format!(
                "sslmode={} needs the root certificate {}; set sslrootcert (or PGSSLROOTCERT) \
                 to the CA file, or `system`",
                self.sslmode_name(),
                file.display()
            )
        })?;
        let certs: Vec<CertificateDer<'static>> =
            rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .with_context(|| format!("{} is not a PEM certificate file", file.display()))?;
        for cert in certs {
            roots
                .add(cert)
                .with_context(|| format!("certificate in {}", file.display()))?;
        }
        if roots.is_empty() {
            bail!("no certificate in {}", file.display());
        }
        Ok(roots)
    }

    fn sslmode_name(&self) -> &'static str {
        match self.sslmode {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Connects, with TLS as `sslmode` says. The error names the target (no password) and
    /// what to check.
    pub fn connect(&self, env: &Env) -> anyhow::Result<postgres::Client> {
        let config = self.client_config();
        let target = self.target();
        let connected = match self.tls(env)? {
            None => config.connect(postgres::NoTls),
            Some(tls) => config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls)),
        };
        connected.map_err(|e| {
            let mut msg = format!("cannot connect to {target}: {}", describe(&e));
            if is_auth_failure(&e) {
                msg.push_str(if self.password.is_some() {
                    "; check the password (PGPASSWORD or the password file)"
                } else {
                    "; no password was given: set PGPASSWORD or add a line to the password \
                     file (PGPASSFILE, default ~/.pgpass)"
                });
            }
            anyhow!(msg)
        })
    }
}

/// The error with its server message and cause chain (the client's Display alone says only
/// "db error").
pub(super) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}

fn is_auth_failure(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.code() == Some(&SqlState::INVALID_PASSWORD)
        || e.code() == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
        // The client's own refusal when the server asks for a password and none was given;
        // its Display is only "invalid configuration", the reason is in its source.
        || describe(e).contains("password missing")
}

fn parse_url(url: &str, env: &Env) -> anyhow::Result<ConnInfo> {
    let rest = url
        .strip_prefix("postgresql://")
        .or_else(|| url.strip_prefix("postgres://"))
        .ok_or_else(|| anyhow!("it must start with postgres:// or postgresql://"))?;
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match main.find('/') {
        Some(i) => (&main[..i], &main[i + 1..]),
        None => (main, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let (mut user, mut password) = (None, None);
    if let Some(ui) = userinfo {
        let (u, p) = match ui.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (ui, None),
        };
        if !u.is_empty() {
            user = Some(percent_decode(u)?);
        }
        if let Some(p) = p {
            password = Some(percent_decode(p)?);
        }
    }
    let (mut host, mut port) = (None, None);
    if hostport.contains(',') {
        bail!("several hosts are not supported; give one");
    }
    let (h, p) = if let Some(inner) = hostport.strip_prefix('[') {
        let (h, after) = inner
            .split_once(']')
            .ok_or_else(|| anyhow!("unclosed [ in the host"))?;
        (h, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !h.is_empty() {
        host = Some(percent_decode(h)?);
    }
    if let Some(p) = p.filter(|p| !p.is_empty()) {
        port = Some(p.to_string());
    }
    let mut dbname = (!path.is_empty())
        .then(|| percent_decode(path))
        .transpose()?;
    let (mut sslmode, mut sslrootcert, mut connect_timeout, mut application_name) =
        (None, None, None, None);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        // Not the text itself in the message: it may be a pasted password.
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("a query parameter has no value (NAME=VALUE expected)"))?;
        // libpq decodes names as it decodes values.
        let k = percent_decode(k)?;
        let v = percent_decode(v)?;
        match k.as_str() {
            "sslmode" => sslmode = Some(v),
            "sslrootcert" => sslrootcert = Some(v),
            "connect_timeout" => connect_timeout = Some(v),
            "application_name" => application_name = Some(v),
            "user" => user = Some(v),
            "password" => password = Some(v),
            "host" => host = Some(v),
            "port" => port = Some(v),
            "dbname" => dbname = Some(v),
            other if other.trim().eq_ignore_ascii_case("password") => bail!(
                "parameter {other:?} is not libpq's `password` (names are lower case); give the \
                 password in the password file (PGPASSFILE, default ~/.pgpass) or PGPASSWORD"
            ),
            other => bail!(
                "parameter {:?} is not supported (sslmode, sslrootcert, connect_timeout, \
                 application_name, user, password, host, port, dbname are)",
                crate::text::ellipsis(other, 40)
            ),
        }
    }
    let var = |name: &str| env.get(name).filter(|v| !v.is_empty()).cloned();
    let user = user
        .or_else(|| var("PGUSER"))
        .or_else(|| var("USER"))
        .ok_or_else(|| anyhow!("no user: give USER@ in the URL or set PGUSER"))?;
    let password = password.or_else(|| var("PGPASSWORD"));
    let host = host
        .or_else(|| var("PGHOST"))
        .unwrap_or_else(|| "localhost".into());
    let port = match port.or_else(|| var("PGPORT")) {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| anyhow!("port {p:?} is not a TCP port number"))?,
        None => 5432,
    };
    let dbname = dbname
        .or_else(|| var("PGDATABASE"))
        .unwrap_or_else(|| user.clone());
    let sslmode = SslMode::parse(
        &sslmode
            .or_else(|| var("PGSSLMODE"))
            .unwrap_or_else(|| "prefer".into()),
    )?;
    let sslrootcert = sslrootcert.or_else(|| var("PGSSLROOTCERT"));
    let connect_timeout = match connect_timeout.or_else(|| var("PGCONNECT_TIMEOUT")) {
        Some(t) => {
            let s: i64 = t
                .trim()
                .parse()
                .map_err(|_| anyhow!("connect_timeout {t:?} is not a number of seconds"))?;
            // libpq: zero or less waits forever; 1 is raised to 2.
            (s > 0).then(|| Duration::from_secs(s.max(2) as u64))
        }
        None => None,
    };
    Ok(ConnInfo {
        user,
        password,
        host,
        port,
        dbname,
        sslmode,
        sslrootcert,
        connect_timeout,
        application_name,
        passfile: None,
    })
}

/// Splits a password-file line at unescaped colons, resolving `\:` and `\\`.
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().unwrap().push(next);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// The password of the first line matching `host:port:db:user` (`*` matches anything).
pub(crate) fn pgpass_lookup(
    text: &str,
    host: &str,
    port: &str,
    db: &str,
    user: &str,
) -> Option<String> {
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f = pgpass_fields(line);
        if f.len() < 5 {
            continue;
        }
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        if matches(&f[0], host)
            && matches(&f[1], port)
            && matches(&f[2], db)
            && matches(&f[3], user)
        {
            // A password with unescaped colons keeps them.
            return Some(f[4..].join(":"));
        }
    }
    None
}

/// `require`: encryption, no authentication of the server (libpq's behaviour).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn url_parts_and_parameters() {
        let info = ConnInfo::parse(
            "postgresql://lab%40x:s%3Acret@db.lab:6543/results?sslmode=verify-full&sslrootcert=/ca.pem&connect_timeout=7&application_name=tx2",
            &env(&[]),
        )
        .unwrap();
        assert_eq!(info.user, "lab@x");
        assert_eq!(info.password.as_deref(), Some("s:cret"));
        assert_eq!((info.host.as_str(), info.port), ("db.lab", 6543));
        assert_eq!(info.dbname, "results");
        assert_eq!(info.sslmode, SslMode::VerifyFull);
        assert_eq!(info.sslrootcert.as_deref(), Some("/ca.pem"));
        assert_eq!(info.connect_timeout, Some(Duration::from_secs(7)));
        assert_eq!(info.application_name.as_deref(), Some("tx2"));
        assert_eq!(info.target().0, "postgres://lab@x@db.lab:6543/results");
        assert!(!format!("{info:?}").contains("s:cret"));
    }

    #[test]
    fn environment_fills_what_the_url_leaves_out() {
        let e = env(&[
            ("PGHOST", "10.0.0.5"),
            ("PGPORT", "5433"),
            ("PGUSER", "board"),
            ("PGPASSWORD", "pw"),
            ("PGDATABASE", "fleet"),
            ("PGSSLMODE", "require"),
        ]);
        let info = ConnInfo::parse("postgres://", &e).unwrap();
        assert_eq!(info.target().0, "postgres://board@10.0.0.5:5433/fleet");
        assert_eq!(info.password.as_deref(), Some("pw"));
        assert_eq!(info.sslmode, SslMode::Require);
        // The URL wins over the environment.
        let info = ConnInfo::parse("postgres://me@h/db?sslmode=disable", &e).unwrap();
        assert_eq!(info.target().0, "postgres://me@h:5433/db");
        assert_eq!(info.sslmode, SslMode::Disable);
        let info = ConnInfo::parse("postgres://me@[::1]:7/db", &e).unwrap();
        assert_eq!(info.target().0, "postgres://me@[::1]:7/db");
        assert_eq!(info.target().short(), "[::1]:7/db");
    }

    #[test]
    fn bad_urls_are_refused_with_the_password_masked() {
        for url in [
            "mysql://u@h/db",
            "postgres://u:hunter2@h:notaport/db",
            "postgres://u:hunter2@h/db?sslmode=sometimes",
            "postgres://u:hunter2@h/db?frobnicate=1",
        ] {
            let e = format!("{:#}", ConnInfo::parse(url, &env(&[])).unwrap_err());
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert_eq!(
            mask_url("postgres://u:hunter2@h/db?password=x&sslmode=require"),
            "postgres://u:***@h/db?password=***&sslmode=require"
        );
        assert!(url_has_password("postgres://u:p@h/db"));
        assert!(url_has_password("postgres://u@h/db?password=p"));
        assert!(!url_has_password("postgres://u@h/db?sslmode=verify-full"));
    }

    #[test]
    fn password_file_lines_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:*:u:nope\nh\\:x:*:db:u:pa\\:ss\\\\w\n*:*:*:*:fallback\n";
        assert_eq!(
            pgpass_lookup(text, "h:x", "5432", "db", "u").as_deref(),
            Some("pa:ss\\w")
        );
        assert_eq!(
            pgpass_lookup(text, "other", "5432", "any", "u").as_deref(),
            Some("nope")
        );
        assert_eq!(
            pgpass_lookup(text, "z", "1", "d", "v").as_deref(),
            Some("fallback")
        );
        assert_eq!(pgpass_lookup("h:1:d:u\n", "h", "1", "d", "u"), None);
    }

    #[test]
    fn password_file_is_used_only_when_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "127.0.0.1:5432:db:u:from-file\n").unwrap();
        let e = env(&[("PGPASSFILE", file.to_str().unwrap())]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let info = ConnInfo::parse("postgres://u@127.0.0.1/db", &e).unwrap();
        assert_eq!(info.password.as_deref(), Some("from-file"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let info = ConnInfo::parse("postgres://u@127.0.0.1/db", &e).unwrap();
        assert_eq!(info.password, None);
        // PGPASSWORD wins over the file.
        let mut e = e;
        e.insert("PGPASSWORD".into(), "from-env".into());
        let info = ConnInfo::parse("postgres://u@127.0.0.1/db", &e).unwrap();
        assert_eq!(info.password.as_deref(), Some("from-env"));
    }
}
