//! The web configuration as data: exporter-toolkit's `tls_server_config`, `basic_auth_users` and
//! `http_server_config`, validated by its loader (`file`) and used by the `web` module.

use std::fmt;
use std::path::PathBuf;

pub(crate) mod file;
#[cfg(test)]
mod tests;

/// The highest bcrypt cost `basic_auth_users` may use. A check at cost 14 holds one core for
/// about a second (0.7 s on a fast one), and each step above doubles it: at cost 31 one login
/// would take about a day. The usual advice is 10 to 12.
pub const MAX_BCRYPT_COST: u32 = 14;

/// The validated web configuration file.
#[derive(Clone, PartialEq)]
pub struct WebConfig {
    /// The file it came from.
    pub file: PathBuf,
    /// `tls_server_config`, when TLS is on.
    pub tls: Option<TlsSettings>,
    /// `basic_auth_users`: user and bcrypt hash (of cost [`MAX_BCRYPT_COST`] at most), in file
    /// order. Empty: no basic auth.
    pub users: Vec<(String, String)>,
    /// `http_server_config.headers`: added to every response.
    pub headers: Vec<(String, String)>,
}

/// PEM material given as a file (re-read when it changes) or inline in the web config.
#[derive(Clone, PartialEq)]
pub enum Pem {
    /// `cert_file`, `key_file`, `client_ca_file`: relative to the web config's directory.
    File(PathBuf),
    /// `cert`, `key`, `client_ca`.
    Inline(String),
}

/// `tls_server_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    /// The certificate chain, leaf first.
    pub cert: Pem,
    /// Its private key.
    pub key: Pem,
    /// CAs that client certificates are verified against.
    pub client_ca: Option<Pem>,
    /// `client_auth_type`.
    pub client_auth: ClientAuth,
    /// `client_allowed_sans`: a client certificate must carry one of these SANs (DNS name, IP
    /// address, e-mail address or URI, compared exactly). Empty: any.
    pub client_allowed_sans: Vec<String>,
    /// `min_version`: 1.2 (default) or 1.3.
    pub min_version: TlsVersion,
    /// `max_version`: 1.2 or 1.3 (default).
    pub max_version: TlsVersion,
    /// `cipher_suites` (TLS 1.2 only, as in Go), in preference order; empty: rustls' own.
    pub cipher_suites: Vec<String>,
    /// `prefer_server_cipher_suites` (default true): the server's order wins.
    pub prefer_server_cipher_suites: bool,
    /// `curve_preferences` as Go names, in preference order; empty: rustls' own.
    pub curve_preferences: Vec<String>,
    /// Where `tls_server_config` and each of its fields were written (line, column), to point
    /// a problem found later (a certificate that does not match its key) at its place.
    pub places: TlsPlaces,
}

/// Lines and columns of `tls_server_config` and of its fields in the web configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPlaces {
    /// The section itself.
    pub section: (usize, usize),
    /// Each field written, by name.
    pub fields: Vec<(&'static str, (usize, usize))>,
}

impl TlsPlaces {
    /// Where `field` was written, or the section when it was not.
    pub fn of(&self, field: &str) -> (usize, usize) {
        self.fields
            .iter()
            .find(|(f, _)| *f == field)
            .map_or(self.section, |&(_, at)| at)
    }
}

/// `client_auth_type`: Go's `tls.ClientAuthType` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert` (default): no certificate asked for.
    NoClientCert,
    /// `RequestClientCert`: asked for, neither required nor verified.
    RequestClientCert,
    /// `RequireAnyClientCert` (or `RequireClientCert`): required, not verified against a CA.
    RequireAnyClientCert,
    /// `VerifyClientCertIfGiven`: verified against the client CA when sent.
    VerifyClientCertIfGiven,
    /// `RequireAndVerifyClientCert`: required and verified against the client CA.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// Parses a Go name.
    pub fn parse(text: &str) -> Option<ClientAuth> {
        Some(match text {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    /// Whether the handshake fails without a client certificate.
    pub fn requires_cert(self) -> bool {
        matches!(
            self,
            ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert
        )
    }

    /// Whether a client certificate is checked against the client CA.
    pub fn verifies(self) -> bool {
        matches!(
            self,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        )
    }
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A TLS protocol version rustls implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLS12`.
    Tls12,
    /// `TLS13`.
    Tls13,
}

/// A TLS version the web configuration may not name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsVersionError {
    #[error(
        "{0} is not supported: sysport's TLS (rustls) implements TLS 1.2 and 1.3 only; use \
         TLS12 or TLS13"
    )]
    Unsupported(String),
    #[error("unknown TLS version {0:?}: expected TLS12 or TLS13")]
    Unknown(String),
}

impl TlsVersion {
    /// Parses a Go name; TLS 1.0 and 1.1 are refused with the reason.
    pub fn parse(text: &str) -> Result<TlsVersion, TlsVersionError> {
        match text {
            "TLS12" => Ok(TlsVersion::Tls12),
            "TLS13" => Ok(TlsVersion::Tls13),
            "TLS10" | "TLS11" => Err(TlsVersionError::Unsupported(text.to_owned())),
            _ => Err(TlsVersionError::Unknown(text.to_owned())),
        }
    }
}

impl WebConfig {
    /// One line for `check-config` and the start-up log.
    pub fn summary(&self) -> String {
        let tls = match &self.tls {
            Some(t) => format!("TLS on, client certificates: {}", t.client_auth),
            None => "TLS off".to_owned(),
        };
        format!(
            "{tls}; basic auth: {} user(s); {} extra header(s)",
            self.users.len(),
            self.headers.len()
        )
    }
}

impl fmt::Debug for WebConfig {
    /// Leaves out the password hashes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("WebConfig")
            .field("file", &self.file)
            .field("tls", &self.tls)
            .field("users", &users)
            .field("headers", &self.headers)
            .finish()
    }
}

impl fmt::Debug for Pem {
    /// Names a file; never prints inline material (it may be a private key).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::File(path) => write!(f, "File({})", path.display()),
            Pem::Inline(_) => f.write_str("Inline(..)"),
        }
    }
}
