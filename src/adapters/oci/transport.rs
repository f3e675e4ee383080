//! oci-client `Client`s per registry, transport and credential; the custom
//! CA; and the classification of registry-client errors.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use oci_client::Client;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use crate::domain::registry::{RegistryCredential, TLS_CA_FILES, split_pem_certificates};

/// The `User-Agent` the runner sends to registries.
pub(crate) const USER_AGENT: &str = concat!("krm-fn-runner/", env!("CARGO_PKG_VERSION"));

/// The CA bundle read from `--tls-secret-path`.
#[derive(Debug, Clone)]
pub(crate) struct CustomCa {
    /// The file the certificates came from (`ca.crt` or `ca.pem`).
    pub file: PathBuf,
    /// Each certificate as its own PEM text.
    pub certificates: Vec<String>,
}

/// Why the CA could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    /// `--tls-secret-path` cannot be read (missing, not a directory, no
    /// permission). Porch ignored errors other than "not found" (spec §10 item 21).
    #[error("--tls-secret-path {path}: {detail}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        detail: String,
    },
    /// Neither `ca.crt` nor `ca.pem` is readable in the directory.
    #[error(
        "--tls-secret-path {path}: ca.crt not found ({crt}), and ca.pem also not found ({pem})"
    )]
    NoCaFile {
        /// The directory.
        path: PathBuf,
        /// Why `ca.crt` could not be read.
        crt: String,
        /// Why `ca.pem` could not be read.
        pem: String,
    },
    /// The CA file holds no PEM certificate.
    #[error("{file}: no PEM certificate found (expected -----BEGIN CERTIFICATE----- blocks)")]
    NoCertificates {
        /// The CA file.
        file: PathBuf,
    },
    /// The TLS stack rejected a certificate of the file.
    #[error("{file}: {detail}")]
    Rejected {
        /// The CA file.
        file: PathBuf,
        /// Why.
        detail: String,
    },
}

impl CustomCa {
    /// Reads `ca.crt`, else `ca.pem`, from `dir` (Porch's order) and checks
    /// that the TLS stack accepts every certificate in it.
    pub fn load(dir: &Path) -> Result<Self, CaError> {
        let meta = std::fs::metadata(dir).map_err(|e| CaError::Dir {
            path: dir.to_path_buf(),
            detail: e.to_string(),
        })?;
        if !meta.is_dir() {
            return Err(CaError::Dir {
                path: dir.to_path_buf(),
                detail: "not a directory".into(),
            });
        }
        let mut failures = Vec::new();
        for name in TLS_CA_FILES {
            let file = dir.join(name);
            match std::fs::read_to_string(&file) {
                Ok(text) => {
                    let certificates = split_pem_certificates(&text);
                    if certificates.is_empty() {
                        return Err(CaError::NoCertificates { file });
                    }
                    let ca = Self { file, certificates };
                    // Building a client parses every certificate.
                    Client::try_from(ca.client_config_base()).map_err(|e| CaError::Rejected {
                        file: ca.file.clone(),
                        detail: error_chain(&e),
                    })?;
                    return Ok(ca);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(CaError::NoCaFile {
            path: dir.to_path_buf(),
            crt: failures.first().cloned().unwrap_or_default(),
            pem: failures.get(1).cloned().unwrap_or_default(),
        })
    }

    fn certificates(&self) -> Vec<Certificate> {
        self.certificates
            .iter()
            .map(|pem| Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.as_bytes().to_vec(),
            })
            .collect()
    }

    fn client_config_base(&self) -> ClientConfig {
        ClientConfig {
            extra_root_certificates: self.certificates(),
            ..ClientConfig::default()
        }
    }
}

/// How a request reaches a registry over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Transport {
    /// The system roots plus the custom CA (`--tls-secret-path`).
    CustomCa,
    /// The system roots only (the default transport).
    System,
}

/// Settings every client shares.
#[derive(Debug, Clone)]
pub(crate) struct ClientSettings {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Registries (`host:port`) reached over plain HTTP.
    pub plain_http: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    registry: String,
    transport: Transport,
}

/// One `Client` per (registry, transport, credential).
///
/// oci-client stores the first credential it is given per registry and
/// ignores later ones ("first auth wins", rust-stack §3), so a client is
/// never shared between credentials: when the credential for a registry
/// changes (a rotated secret), its client is replaced.
pub(crate) struct ClientPool {
    settings: ClientSettings,
    ca: Option<CustomCa>,
    clients: Mutex<HashMap<PoolKey, (u64, Client)>>,
}

fn fingerprint(c: &RegistryCredential) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    c.hash(&mut h);
    h.finish()
}

impl ClientPool {
    pub fn new(settings: ClientSettings, ca: Option<CustomCa>) -> Self {
        Self {
            settings,
            ca,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The custom CA, if one is configured.
    pub fn ca(&self) -> Option<&CustomCa> {
        self.ca.as_ref()
    }

    /// The transports to try, in order: the custom CA first when one is
    /// configured, then the default transport.
    pub fn transports(&self) -> &'static [Transport] {
        if self.ca.is_some() {
            &[Transport::CustomCa, Transport::System]
        } else {
            &[Transport::System]
        }
    }

    /// True when `registry` is reached over plain HTTP.
    pub fn is_plain_http(&self, registry: &str) -> bool {
        self.settings.plain_http.iter().any(|r| r == registry)
    }

    /// The client for `registry` over `transport` with `credential`,
    /// created on first use. Errors: the TLS stack rejected the CA.
    pub fn client(
        &self,
        registry: &str,
        transport: Transport,
        credential: &RegistryCredential,
    ) -> Result<Client, OciDistributionError> {
        let key = PoolKey {
            registry: registry.to_string(),
            transport,
        };
        let fp = fingerprint(credential);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((existing, client)) = clients.get(&key)
            && *existing == fp
        {
            return Ok(client.clone());
        }
        let config = ClientConfig {
            protocol: if self.is_plain_http(registry) {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            extra_root_certificates: match (transport, &self.ca) {
                (Transport::CustomCa, Some(ca)) => ca.certificates(),
                _ => Vec::new(),
            },
            // Index entries are selected by the inspector itself.
            platform_resolver: None,
            connect_timeout: Some(self.settings.connect_timeout),
            read_timeout: Some(self.settings.read_timeout),
            user_agent: USER_AGENT,
            ..ClientConfig::default()
        };
        let client = Client::try_from(config)?;
        clients.insert(key, (fp, client.clone()));
        Ok(client)
    }
}

/// The oci-client form of a credential.
pub(crate) fn registry_auth(c: &RegistryCredential) -> RegistryAuth {
    match c {
        RegistryCredential::Anonymous => RegistryAuth::Anonymous,
        RegistryCredential::Basic { username, password } => {
            RegistryAuth::Basic(username.clone(), password.clone())
        }
        RegistryCredential::Bearer(t) => RegistryAuth::Bearer(t.clone()),
    }
}

/// An error and its sources, `: `-joined, with repeated messages dropped.
pub(crate) fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let msg = err.to_string();
        if !parts.iter().any(|p| p.contains(&msg)) {
            parts.push(msg);
        }
        // io::Error hides its inner error from `source()`; show it.
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            let msg = inner.to_string();
            if !parts.iter().any(|p| p.contains(&msg)) {
                parts.push(msg);
            }
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// True when `e` failed in the TLS handshake or certificate verification
/// (the only errors that justify trying another transport; never 404 or
/// auth, spec §10 item 21).
pub(crate) fn is_tls_error(e: &OciDistributionError) -> bool {
    let OciDistributionError::RequestError(req) = e else {
        return false;
    };
    let mut cur: Option<&(dyn StdError + 'static)> = Some(req);
    while let Some(err) = cur {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            if inner.downcast_ref::<rustls::Error>().is_some() {
                return true;
            }
            let msg = inner.to_string().to_ascii_lowercase();
            if msg.contains("certificate") || msg.contains("handshake") {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// How a non-TLS registry-client error is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    NotFound(String),
    Unauthorized(String),
    Transient(String),
    InvalidImage(String),
    InvalidReference(String),
    Other(String),
}

/// Sorts a registry-client error into the inspector's error classes.
pub(crate) fn classify(e: &OciDistributionError) -> Class {
    let detail = error_chain(e);
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Class::Unauthorized(detail),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::ManifestBlobUnknown
                )
            }) {
                Class::NotFound(detail)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                Class::Unauthorized(detail)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
            {
                Class::Transient(detail)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::NameInvalid | OciErrorCode::TagInvalid))
            {
                Class::InvalidReference(detail)
            } else {
                Class::Other(detail)
            }
        }
        OciDistributionError::ServerError { code, .. } => match *code {
            404 => Class::NotFound(detail),
            401 | 403 => Class::Unauthorized(detail),
            429 | 500..=599 => Class::Transient(detail),
            _ => Class::Other(detail),
        },
        OciDistributionError::RequestError(req) => {
            if req.is_timeout() || req.is_connect() || req.is_request() || req.is_body() {
                Class::Transient(detail)
            } else {
                Class::Other(detail)
            }
        }
        OciDistributionError::ManifestParsingError(_)
        | OciDistributionError::VersionedParsingError(_)
        | OciDistributionError::UnsupportedMediaTypeError(_)
        | OciDistributionError::UnsupportedSchemaVersionError(_)
        | OciDistributionError::DigestError(_)
        | OciDistributionError::SpecViolationError(_)
        | OciDistributionError::JsonError(_) => Class::InvalidImage(detail),
        _ => Class::Other(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_loading_reports_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let e = CustomCa::load(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, CaError::Dir { .. }), "{e}");
        let e = CustomCa::load(dir.path()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("ca.crt not found") && text.contains("ca.pem also not found"),
            "{text}"
        );
        std::fs::write(dir.path().join("ca.pem"), "no certificate").unwrap();
        let e = CustomCa::load(dir.path()).unwrap_err();
        assert!(matches!(e, CaError::NoCertificates { .. }), "{e}");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            CustomCa::load(&file).unwrap_err(),
            CaError::Dir { .. }
        ));
    }

    #[test]
    fn auth_and_not_found_errors_are_never_tls_errors() {
        let unauthorized = OciDistributionError::UnauthorizedError {
            url: "https://r/v2/x/manifests/v1".into(),
        };
        assert!(!is_tls_error(&unauthorized));
        assert!(matches!(classify(&unauthorized), Class::Unauthorized(_)));
        let not_found = OciDistributionError::ServerError {
            code: 404,
            url: "u".into(),
            message: "m".into(),
        };
        assert!(!is_tls_error(&not_found));
        assert!(matches!(classify(&not_found), Class::NotFound(_)));
        let unavailable = OciDistributionError::ServerError {
            code: 503,
            url: "u".into(),
            message: "m".into(),
        };
        assert!(matches!(classify(&unavailable), Class::Transient(_)));
    }

    #[test]
    fn clients_are_kept_per_credential() {
        let pool = ClientPool::new(
            ClientSettings {
                connect_timeout: Duration::from_secs(1),
                read_timeout: Duration::from_secs(1),
                plain_http: vec!["127.0.0.1:5000".into()],
            },
            None,
        );
        let a = RegistryCredential::Anonymous;
        let b = RegistryCredential::Basic {
            username: "u".into(),
            password: "p".into(),
        };
        pool.client("r", Transport::System, &a).unwrap();
        pool.client("r", Transport::System, &b).unwrap();
        assert_eq!(pool.clients.lock().unwrap().len(), 1);
        assert_eq!(
            pool.clients.lock().unwrap().values().next().unwrap().0,
            fingerprint(&b)
        );
        assert!(pool.is_plain_http("127.0.0.1:5000"));
        assert_eq!(pool.transports(), &[Transport::System]);
    }
}
