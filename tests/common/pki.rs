//! Certificates for the TLS tests, made with the `openssl` command in a temporary directory
//! (never checked in): a CA, and server or client certificates it signs.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory of PEM files, removed on drop.
pub struct Pki {
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub fn new(test: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("sysport-pki-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pki dir");
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read pem")
    }

    /// `NAME.crt` and `NAME.key`: a self-signed CA.
    pub fn ca(&self, name: &str) {
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }

    /// `NAME.crt` and `NAME.key` signed by `ca`, with the given subjectAltName list
    /// (`DNS:localhost,IP:127.0.0.1`), for servers and clients.
    pub fn leaf(&self, ca: &str, name: &str, sans: &str) {
        self.leaf_keyed(
            ca,
            name,
            sans,
            &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        );
    }

    /// [`Pki::leaf`] with an RSA key of `bits` bits: the costliest signature a handshake makes.
    pub fn leaf_rsa(&self, ca: &str, name: &str, sans: &str, bits: u32) {
        self.leaf_keyed(ca, name, sans, &["-newkey", &format!("rsa:{bits}")]);
    }

    fn leaf_keyed(&self, ca: &str, name: &str, sans: &str, key: &[&str]) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!(
                "subjectAltName={sans}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .expect("ext file");
        openssl(
            &self.dir,
            &[
                &["req", "-new"][..],
                key,
                &[
                    "-nodes",
                    "-subj",
                    &format!("/CN={name}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            ]
            .concat(),
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }

    /// A reqwest identity from `NAME.crt` and `NAME.key`.
    pub fn identity(&self, name: &str) -> reqwest::Identity {
        let mut pem = self.read(&format!("{name}.crt"));
        pem.extend(self.read(&format!("{name}.key")));
        reqwest::Identity::from_pem(&pem).expect("identity")
    }

    /// A client trusting only `ca`, optionally presenting `identity`; a new connection per
    /// request, so each sees the certificate served at that moment.
    pub fn client(&self, ca: &str, identity: Option<&str>) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(&self.read(&format!("{ca}.crt"))).expect("ca");
        let mut b = reqwest::Client::builder()
            .no_proxy()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .pool_max_idle_per_host(0)
            .timeout(std::time::Duration::from_secs(10));
        if let Some(name) = identity {
            b = b.identity(self.identity(name));
        }
        b.build().expect("client")
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
