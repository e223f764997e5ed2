//! The web configuration file (exporter-toolkit's format: `tls_server_config`,
//! `http_server_config`, `basic_auth_users`), loaded like the main file: every problem with
//! the web file's name, line and column. Values are taken literally (no `${VAR}`: a bcrypt hash
//! is full of `$`); a hash of a cost over [`MAX_BCRYPT_COST`] is refused. Whether the certificate and key load and pair is for the TLS stack to tell:
//! `web::tls::check` does it on the loaded configuration, for `check-config` and start-up alike.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::{Location, Spanned};

use super::{ClientAuth, MAX_BCRYPT_COST, Pem, TlsPlaces, TlsSettings, TlsVersion, WebConfig};
use crate::config::check::parse_bool;
use crate::config::env::Env;
use crate::config::error::ConfigIssue;
use crate::config::loader::{Loader, Origin};
use crate::config::section::{RawLabels, Text};

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeb {
    tls_server_config: Option<Spanned<RawTls>>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<RawLabels>,
    rate_limit: Option<Spanned<IgnoredAny>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<Text>,
    key: Option<Text>,
    client_ca: Option<Text>,
    cert_file: Option<Text>,
    key_file: Option<Text>,
    client_auth_type: Option<Text>,
    client_ca_file: Option<Text>,
    client_allowed_sans: Option<Vec<Text>>,
    min_version: Option<Text>,
    max_version: Option<Text>,
    cipher_suites: Option<Vec<Text>>,
    prefer_server_cipher_suites: Option<Text>,
    curve_preferences: Option<Vec<Text>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<Text>,
    headers: Option<RawLabels>,
}

/// Headers exporter-toolkit lets a web config set, and the values it accepts (any when empty).
const HEADERS: [(&str, &[&str]); 5] = [
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// Loads the web configuration at `path`; the problems carry its name and positions.
pub(crate) fn load(path: &Path, env: &dyn Env) -> Result<WebConfig, Vec<ConfigIssue>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) => {
            return Err(vec![ConfigIssue {
                file: Some(path.to_owned()),
                line: None,
                column: None,
                field: String::new(),
                message: format!("cannot read the web configuration file: {err}"),
            }]);
        }
    };
    let mut loader = Loader::new(env, Some(path.to_owned()), text);
    let raw: RawWeb = loader.parse();
    let dir = path.parent().unwrap_or(Path::new("")).to_owned();
    let mut web = WebConfig {
        file: path.to_owned(),
        tls: None,
        users: Vec::new(),
        headers: Vec::new(),
    };
    if let Some(limit) = raw.rate_limit {
        loader.issue(
            Origin::File(limit.referenced),
            "rate_limit",
            "not supported by sysport: the listener bounds clients instead (listen.max_connections, \
             listen.request_head_timeout)",
        );
    }
    for (user, hash) in raw.basic_auth_users.map(|u| u.0).unwrap_or_default() {
        let field = format!("basic_auth_users.{}", user.value);
        match hash.value.parse::<bcrypt::HashParts>() {
            Err(e) => {
                let message =
                    format!("not a bcrypt hash ({e}): make one with `htpasswd -nBC 10 \"\"`");
                loader.issue(Origin::File(hash.referenced), &field, message);
            }
            // One login would hold a core for as long as the cost says (a day at 31), and
            // every other login wait behind it.
            Ok(parts) if parts.get_cost() > MAX_BCRYPT_COST => {
                let message = format!(
                    "bcrypt cost {} is over {MAX_BCRYPT_COST}, the most sysport accepts (a check \
                     at cost {MAX_BCRYPT_COST} holds a core for about a second, and each step \
                     doubles it): make a new hash with `htpasswd -nBC 12 {}`",
                    parts.get_cost(),
                    user.value
                );
                loader.issue(Origin::File(hash.referenced), &field, message);
            }
            Ok(_) => web.users.push((user.value, hash.value)),
        }
    }
    if let Some(http) = raw.http_server_config {
        if let Some(http2) = &http.http2 {
            // Accepted for compatibility: clients negotiate HTTP/1.1 through ALPN.
            if let Err(message) = parse_bool(&http2.value) {
                loader.issue(
                    Origin::File(http2.referenced),
                    "http_server_config.http2",
                    message.to_string(),
                );
            }
        }
        for (name, value) in http.headers.map(|h| h.0).unwrap_or_default() {
            let field = format!("http_server_config.headers.{}", name.value);
            match HEADERS.iter().find(|(h, _)| *h == name.value) {
                None => {
                    let allowed: Vec<&str> = HEADERS.iter().map(|(h, _)| *h).collect();
                    let message = format!(
                        "HTTP header {:?} can not be configured; one of: {}",
                        name.value,
                        allowed.join(", ")
                    );
                    loader.issue(Origin::File(name.referenced), &field, message);
                }
                Some((_, values))
                    if !values.is_empty() && !values.contains(&value.value.as_str()) =>
                {
                    let message = format!(
                        "invalid value {:?}: expected one of {values:?}",
                        value.value
                    );
                    loader.issue(Origin::File(value.referenced), &field, message);
                }
                Some(_) => web.headers.push((name.value, value.value)),
            }
        }
    }
    if let Some(tls) = raw.tls_server_config {
        web.tls = tls_settings(&mut loader, tls, &dir);
    }
    if loader.issues.is_empty() {
        Ok(web)
    } else {
        Err(loader.issues)
    }
}

/// Where each `tls_server_config` field was written, to point a problem at it.
struct Places {
    section: Location,
    fields: HashMap<&'static str, Location>,
}

impl Places {
    fn data(&self) -> TlsPlaces {
        let at = |l: &Location| (l.line() as usize, l.column() as usize);
        let mut fields: Vec<(&'static str, (usize, usize))> =
            self.fields.iter().map(|(f, l)| (*f, at(l))).collect();
        fields.sort();
        TlsPlaces {
            section: at(&self.section),
            fields,
        }
    }

    fn issue(&self, loader: &mut Loader<'_>, field: &'static str, message: impl Into<String>) {
        let location = self.fields.get(field).copied().unwrap_or(self.section);
        loader.issue(
            Origin::File(location),
            &format!("tls_server_config.{field}"),
            message,
        );
    }

    fn text(&mut self, text: Option<Text>, field: &'static str) -> Option<String> {
        text.map(|t| {
            self.fields.insert(field, t.referenced);
            t.value
        })
    }

    /// A file or inline PEM; both given is a problem.
    fn pem(
        &mut self,
        loader: &mut Loader<'_>,
        (file, inline): (Option<Text>, Option<Text>),
        (file_field, inline_field): (&'static str, &'static str),
        dir: &Path,
    ) -> Option<Pem> {
        if let (Some(path), Some(_)) = (&file, &inline) {
            self.fields.insert(file_field, path.referenced);
            let message = format!("give {file_field} or {inline_field}, not both");
            self.issue(loader, file_field, message);
            return None;
        }
        if let Some(path) = self.text(file, file_field) {
            return Some(Pem::File(dir.join(path)));
        }
        self.text(inline, inline_field).map(Pem::Inline)
    }

    fn version(
        &self,
        loader: &mut Loader<'_>,
        text: Option<String>,
        field: &'static str,
        default: TlsVersion,
    ) -> Option<TlsVersion> {
        match text.as_deref().map(TlsVersion::parse) {
            None => Some(default),
            Some(Ok(v)) => Some(v),
            Some(Err(problem)) => {
                self.issue(loader, field, problem.to_string());
                None
            }
        }
    }
}

fn tls_settings(loader: &mut Loader<'_>, raw: Spanned<RawTls>, dir: &Path) -> Option<TlsSettings> {
    let mut places = Places {
        section: raw.referenced,
        fields: HashMap::new(),
    };
    let raw = raw.value;
    let cert = places.pem(
        loader,
        (raw.cert_file, raw.cert),
        ("cert_file", "cert"),
        dir,
    );
    let key = places.pem(loader, (raw.key_file, raw.key), ("key_file", "key"), dir);
    let client_ca = places.pem(
        loader,
        (raw.client_ca_file, raw.client_ca),
        ("client_ca_file", "client_ca"),
        dir,
    );
    let client_auth_text = places.text(raw.client_auth_type, "client_auth_type");
    let min_text = places.text(raw.min_version, "min_version");
    let max_text = places.text(raw.max_version, "max_version");
    let prefer_text = places.text(
        raw.prefer_server_cipher_suites,
        "prefer_server_cipher_suites",
    );
    if let Some(sans) = raw.client_allowed_sans.as_ref().and_then(|s| s.first()) {
        places.fields.insert("client_allowed_sans", sans.referenced);
    }
    if let Some(suite) = raw.cipher_suites.as_ref().and_then(|s| s.first()) {
        places.fields.insert("cipher_suites", suite.referenced);
    }
    if let Some(curve) = raw.curve_preferences.as_ref().and_then(|s| s.first()) {
        places.fields.insert("curve_preferences", curve.referenced);
    }
    for (missing, needs) in [
        (
            cert.is_none() && !places.fields.contains_key("cert_file"),
            "cert_file (or cert)",
        ),
        (
            key.is_none() && !places.fields.contains_key("key_file"),
            "key_file (or key)",
        ),
    ] {
        if missing {
            loader.issue(
                Origin::File(places.section),
                "tls_server_config",
                format!("missing {needs}"),
            );
        }
    }
    let client_auth = match client_auth_text.as_deref().map(ClientAuth::parse) {
        None => ClientAuth::NoClientCert,
        Some(Some(auth)) => auth,
        Some(None) => {
            let message = format!(
                "invalid client_auth_type {:?}: expected NoClientCert, RequestClientCert, \
                 RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                client_auth_text.unwrap_or_default()
            );
            places.issue(loader, "client_auth_type", message);
            return None;
        }
    };
    let min_version = places.version(loader, min_text, "min_version", TlsVersion::Tls12);
    let max_version = places.version(loader, max_text, "max_version", TlsVersion::Tls13);
    let prefer = match prefer_text.as_deref().map(parse_bool) {
        None => Some(true),
        Some(Ok(b)) => Some(b),
        Some(Err(message)) => {
            places.issue(loader, "prefer_server_cipher_suites", message.to_string());
            None
        }
    };
    let list = |texts: Option<Vec<Text>>| -> Vec<String> {
        texts
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.value)
            .collect()
    };
    let settings = TlsSettings {
        cert: cert?,
        key: key?,
        client_ca,
        client_auth,
        client_allowed_sans: list(raw.client_allowed_sans),
        min_version: min_version?,
        max_version: max_version?,
        cipher_suites: list(raw.cipher_suites),
        prefer_server_cipher_suites: prefer?,
        curve_preferences: list(raw.curve_preferences),
        places: places.data(),
    };
    Some(settings)
}

/// The web configuration file in force: `--web.config.file` > `SYSPORT_WEB_CONFIG` >
/// `listen.web_config_file`.
pub(crate) fn chosen(
    flag: Option<&PathBuf>,
    env: &dyn Env,
    file: Option<PathBuf>,
) -> Option<PathBuf> {
    flag.cloned()
        .or_else(|| {
            crate::config::env::setting(env, crate::config::env::SYSPORT_WEB_CONFIG)
                .map(PathBuf::from)
        })
        .or(file)
}
