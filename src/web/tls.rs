//! The rustls server configuration for a `tls_server_config`, with the ring crypto provider, and
//! its reload when the certificate, key or client-CA files change (cert-manager renews a
//! Secret in place): new connections get the new pair; a broken new pair keeps the old one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus::{IntCounterVec, Opts};
use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::{self as provider, cipher_suite, kx_group};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, version};
use tokio::sync::watch;

use super::verify::{AllowedSans, AnyClientCert};
use crate::config::{ClientAuth, Config, ConfigError, ConfigIssue, Pem, TlsSettings, TlsVersion};
use crate::telemetry::{NAMESPACE, Telemetry};

/// How often the files are looked at for changes.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A problem building the TLS configuration, naming the field it comes from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TlsError {
    /// The `tls_server_config` field at fault (`cert_file`, `cipher_suites`, ...).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> TlsError {
    TlsError {
        field,
        message: message.into(),
    }
}

/// Go's names of the TLS 1.2 suites rustls offers with ring, and the suites.
fn tls12_suite(name: &str) -> Option<SupportedCipherSuite> {
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// Go's TLS 1.3 suite names: valid in the file, and (as in Go) not configurable.
const TLS13_SUITES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The ring provider narrowed to the configured suites and curves.
fn crypto_provider(settings: &TlsSettings) -> Result<CryptoProvider, TlsError> {
    let mut p = provider::default_provider();
    if !settings.cipher_suites.is_empty() {
        let mut suites: Vec<SupportedCipherSuite> = p
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.version() == &version::TLS13)
            .collect();
        for name in &settings.cipher_suites {
            if TLS13_SUITES.contains(&name.as_str()) {
                continue;
            }
            let suite = tls12_suite(name).ok_or_else(|| {
                err(
                    "cipher_suites",
                    format!(
                        "cipher suite {name:?} is not available: sysport's TLS (rustls) offers only \
                         ECDHE suites with AES-GCM or ChaCha20-Poly1305, such as \
                         TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
                    ),
                )
            })?;
            suites.push(suite);
        }
        p.cipher_suites = suites;
    }
    if !settings.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &settings.curve_preferences {
            groups.push(match name.as_str() {
                "X25519" => kx_group::X25519,
                "CurveP256" => kx_group::SECP256R1,
                "CurveP384" => kx_group::SECP384R1,
                "CurveP521" => {
                    return Err(err(
                        "curve_preferences",
                        "CurveP521 is not available in sysport's TLS (rustls with ring); use \
                         X25519, CurveP256 or CurveP384",
                    ));
                }
                _ => {
                    return Err(err(
                        "curve_preferences",
                        format!("unknown curve {name:?}: expected X25519, CurveP256 or CurveP384"),
                    ));
                }
            });
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

/// Reads PEM material: a file's bytes, or the inline text.
fn read(pem: &Pem, field: &'static str) -> Result<Vec<u8>, TlsError> {
    match pem {
        Pem::Inline(text) => Ok(text.as_bytes().to_vec()),
        Pem::File(path) => std::fs::read(path)
            .map_err(|e| err(field, format!("cannot read {}: {e}", path.display()))),
    }
}

fn certificates(pem: &Pem, field: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(pem, field)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(field, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(err(
            field,
            "no PEM certificate (\"BEGIN CERTIFICATE\") in it",
        ));
    }
    Ok(certs)
}

/// The loaded `config` when its web configuration's TLS material loads (every file read, the
/// certificate paired with its key, the suites and curves known); else the problem with the
/// web file's name, line and field, as every configuration problem is reported.
pub fn check(config: Config) -> Result<Config, ConfigError> {
    let Some(web) = &config.listen.web else {
        return Ok(config);
    };
    let Some(settings) = &web.tls else {
        return Ok(config);
    };
    match server_config(settings) {
        Ok(_) => Ok(config),
        Err(e) => {
            let (line, column) = settings.places.of(e.field);
            Err(ConfigError {
                issues: vec![ConfigIssue {
                    file: Some(web.file.clone()),
                    line: Some(line),
                    column: Some(column),
                    field: format!("tls_server_config.{}", e.field),
                    message: e.message,
                }],
            })
        }
    }
}

/// Builds the rustls server configuration, reading every file.
pub fn server_config(settings: &TlsSettings) -> Result<ServerConfig, TlsError> {
    let (cert_field, key_field, ca_field) = (
        field_name(&settings.cert, "cert_file", "cert"),
        field_name(&settings.key, "key_file", "key"),
        settings.client_ca.as_ref().map_or("client_ca_file", |p| {
            field_name(p, "client_ca_file", "client_ca")
        }),
    );
    let chain = certificates(&settings.cert, cert_field)?;
    let key_bytes = read(&settings.key, key_field)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes)
        .map_err(|e| err(key_field, format!("no usable PEM private key: {e}")))?;
    let provider = Arc::new(crypto_provider(settings)?);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &version::TLS12),
        (TlsVersion::Tls13, &version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (settings.min_version..=settings.max_version).contains(v))
    .map(|(_, v)| v)
    .collect();
    if versions.is_empty() {
        return Err(err("min_version", "min_version is above max_version"));
    }
    let verifier = client_verifier(settings, &provider, ca_field)?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| err("cipher_suites", format!("no usable cipher suite: {e}")))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        err(
            key_field,
            format!("the certificate and key do not make a pair: {e}"),
        )
    })?;
    config.ignore_client_order = settings.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn field_name(pem: &Pem, file: &'static str, inline: &'static str) -> &'static str {
    match pem {
        Pem::File(_) => file,
        Pem::Inline(_) => inline,
    }
}

fn client_verifier(
    settings: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    ca_field: &'static str,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
    let auth = settings.client_auth;
    if settings.client_ca.is_some() && auth == ClientAuth::NoClientCert {
        return Err(err(
            "client_auth_type",
            "a client CA is configured but client_auth_type is NoClientCert",
        ));
    }
    if !settings.client_allowed_sans.is_empty() && !auth.requires_cert() {
        return Err(err(
            "client_allowed_sans",
            "client_allowed_sans requires client_auth_type RequireAnyClientCert or \
             RequireAndVerifyClientCert",
        ));
    }
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ClientCertVerifier> = match auth {
        ClientAuth::NoClientCert => return Ok(None),
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
            Arc::new(AnyClientCert::new(auth.requires_cert(), algorithms))
        }
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let Some(ca) = &settings.client_ca else {
                return Err(err(
                    "client_ca_file",
                    format!("client_auth_type {auth} needs client_ca_file (or client_ca)"),
                ));
            };
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, ca_field)? {
                roots
                    .add(cert)
                    .map_err(|e| err(ca_field, format!("not a usable CA certificate: {e}")))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if auth.requires_cert() {
                builder
            } else {
                builder.allow_unauthenticated()
            };
            builder
                .build()
                .map_err(|e| err(ca_field, format!("cannot verify clients with it: {e}")))?
        }
    };
    if settings.client_allowed_sans.is_empty() {
        Ok(Some(verifier))
    } else {
        Ok(Some(Arc::new(AllowedSans::new(
            verifier,
            settings.client_allowed_sans.clone(),
        ))))
    }
}

/// What the files looked like when last read: a change of any of them triggers a reload.
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

fn stamp(settings: &TlsSettings) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    [
        Some(&settings.cert),
        Some(&settings.key),
        settings.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|pem| match pem {
        Pem::File(path) => Some(path),
        Pem::Inline(_) => None,
    })
    .map(|path| {
        std::fs::metadata(path).ok().map(|m| {
            (
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.len(),
                m.ino(),
            )
        })
    })
    .collect()
}

/// The server configuration in force, replaced when the files change.
pub struct Reloader {
    settings: TlsSettings,
    current: watch::Sender<Arc<ServerConfig>>,
    reloads: IntCounterVec,
}

impl Reloader {
    /// Builds the first configuration and registers
    /// `dynamo_sysport_tls_certificate_reloads_total{result}`.
    pub fn new(settings: TlsSettings, telemetry: &Telemetry) -> Result<Reloader, TlsError> {
        let config = server_config(&settings)?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "tls_certificate_reloads_total",
                "Reloads of the TLS certificate, key and client CA after their files changed, by \
                 result; on failure the previous ones stay in use.",
            )
            .namespace(NAMESPACE),
            &["result"],
        )
        .expect("valid metric");
        for result in ["success", "failure"] {
            reloads.with_label_values(&[result]);
        }
        telemetry.register(Box::new(reloads.clone()));
        Ok(Reloader {
            settings,
            current: watch::channel(Arc::new(config)).0,
            reloads,
        })
    }

    /// The configuration for the next handshake.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ServerConfig>> {
        self.current.subscribe()
    }

    /// Looks at the files every [`RELOAD_CHECK`] until `stop` is set.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut seen = stamp(&self.settings);
        let mut tick = tokio::time::interval(RELOAD_CHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = crate::listener::until_set(&mut stop) => return,
            }
            let now = stamp(&self.settings);
            if now == seen {
                continue;
            }
            seen = now;
            match server_config(&self.settings) {
                Ok(config) => {
                    self.current.send_replace(Arc::new(config));
                    self.reloads.with_label_values(&["success"]).inc();
                    tracing::info!("TLS certificate reloaded");
                }
                Err(e) => {
                    self.reloads.with_label_values(&["failure"]).inc();
                    tracing::error!(field = e.field, error = %e,
                        "TLS certificate reload failed; the previous certificate stays in use");
                }
            }
        }
    }
}
