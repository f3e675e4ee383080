//! Pure registry rules: Docker config credential lookup, entrypoints from an
//! image config, platform selection out of multi-arch indexes, CA bundles
//! and the metadata cache policy.
//!
//! Nothing here does I/O; the OCI adapter (`crate::adapters::oci`) reads the
//! files and talks to registries, and asks these functions what to do.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::image::DOCKER_HUB_HOST;

/// The key `docker login` writes for Docker Hub in `config.json`.
pub const DOCKER_HUB_CONFIG_KEY: &str = "https://index.docker.io/v1/";

/// The CA file names looked up, in this order, in `--tls-secret-path`
/// (Porch: `ca.crt`, else `ca.pem`).
pub const TLS_CA_FILES: [&str; 2] = ["ca.crt", "ca.pem"];

/// Normalises a registry host the way Docker does for credential lookup:
/// Docker Hub's aliases (`docker.io`, `registry-1.docker.io`,
/// `registry.hub.docker.com`) become `index.docker.io`; other hosts (with
/// their port) are returned as they are.
pub fn normalize_registry_host(host: &str) -> &str {
    match host {
        "docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => DOCKER_HUB_HOST,
        _ => host,
    }
}

/// The registry host a Docker config `auths` key stands for, the way Docker
/// converts keys to host names: an `http://` or `https://` scheme and
/// everything from the first `/` after the host are dropped, then Docker
/// Hub's aliases are normalised ([`normalize_registry_host`]).
///
/// `https://index.docker.io/v1/`, `index.docker.io`, `docker.io` all give
/// `index.docker.io`; `http://127.0.0.1:5000/v2/` gives `127.0.0.1:5000`.
/// This fixes Porch's exact-key lookup (spec §10 item 20).
pub fn docker_config_key_host(key: &str) -> &str {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = rest.split('/').next().unwrap_or(rest);
    normalize_registry_host(host)
}

/// A credential for one registry, ready for a registry client.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum RegistryCredential {
    /// No credential: anonymous pulls (token exchange may still happen).
    Anonymous,
    /// User name and password, sent as HTTP Basic or to the token endpoint.
    Basic {
        /// User name.
        username: String,
        /// Password or access token.
        password: String,
    },
    /// A registry bearer token (`registrytoken` in a Docker config), sent
    /// as is without a challenge.
    Bearer(String),
}

impl RegistryCredential {
    /// A short description for logs and errors that never shows the secret:
    /// `anonymous`, `basic auth as "<user>"`, `bearer token`.
    pub fn describe(&self) -> String {
        match self {
            RegistryCredential::Anonymous => "anonymous".to_string(),
            RegistryCredential::Basic { username, .. } => format!("basic auth as {username:?}"),
            RegistryCredential::Bearer(_) => "bearer token".to_string(),
        }
    }
}

impl fmt::Debug for RegistryCredential {
    /// Redacts secrets: same text as [`RegistryCredential::describe`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// What a Docker config says about one registry host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialLookup {
    /// An inline credential from `auths`, with the key it came from.
    Found {
        /// The `auths` key that matched (e.g. `https://index.docker.io/v1/`).
        key: String,
        /// The credential.
        credential: RegistryCredential,
    },
    /// A credential helper must be asked: `docker-credential-<name>`
    /// (from `credHelpers[host]` or `credsStore`).
    Helper(String),
    /// Nothing configured for this host: pull anonymously.
    NotConfigured,
}

/// Why a Docker config cannot be used.
///
/// Not comparable: the parse variants keep the JSON decoder's error as
/// their source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DockerConfigError {
    /// The bytes are not a Docker config JSON (`{"auths": {...}}`); the
    /// decoder's error (with line and column) is the source.
    #[error("not a Docker config JSON: {0}")]
    Parse(#[source] Arc<serde_json::Error>),
    /// The JSON is not an object.
    #[error("not a Docker config JSON: expected a JSON object")]
    NotAnObject,
    /// The legacy `.dockercfg` form (the `auths` map at the top level) does
    /// not decode; the decoder's error is the source.
    #[error("not a Docker config JSON: legacy .dockercfg: {0}")]
    Legacy(#[source] Arc<serde_json::Error>),
    /// The `auth` field of the entry is not base64 of `user:password`.
    #[error("the \"auth\" field of entry {key:?} is not base64 of user:password")]
    BadAuth {
        /// The `auths` key.
        key: String,
    },
    /// The entry holds only an `identitytoken` (an OAuth refresh token),
    /// which the registry client cannot exchange.
    #[error(
        "entry {key:?} holds an identitytoken, which is not supported; use a username and password (or access token) instead"
    )]
    IdentityTokenUnsupported {
        /// The `auths` key.
        key: String,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    auths: Option<BTreeMap<String, AuthEntry>>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

/// A parsed Docker config: `~/.docker/config.json`, or the
/// `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerConfig {
    auths: BTreeMap<String, AuthEntryOwned>,
    cred_helpers: BTreeMap<String, String>,
    creds_store: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct AuthEntryOwned {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
    registrytoken: Option<String>,
}

impl From<AuthEntry> for AuthEntryOwned {
    fn from(e: AuthEntry) -> Self {
        Self {
            auth: e.auth,
            username: e.username,
            password: e.password,
            identitytoken: e.identitytoken,
            registrytoken: e.registrytoken,
        }
    }
}

impl DockerConfig {
    /// Parses `bytes` as `{"auths": {...}, "credHelpers": {...}, "credsStore": ...}`,
    /// or as the legacy `.dockercfg` form (the `auths` map at the top level).
    ///
    /// Errors: [`DockerConfigError::Parse`], [`DockerConfigError::NotAnObject`]
    /// or [`DockerConfigError::Legacy`] for anything else.
    pub fn parse(bytes: &[u8]) -> Result<Self, DockerConfigError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| DockerConfigError::Parse(Arc::new(e)))?;
        let obj = value.as_object().ok_or(DockerConfigError::NotAnObject)?;
        let known = ["auths", "credHelpers", "credsStore"];
        let modern = obj.is_empty() || obj.keys().any(|k| known.contains(&k.as_str()));
        if modern {
            let raw: RawConfig =
                serde_json::from_value(value).map_err(|e| DockerConfigError::Parse(Arc::new(e)))?;
            Ok(Self {
                auths: raw
                    .auths
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into()))
                    .collect(),
                cred_helpers: raw.cred_helpers,
                creds_store: raw.creds_store.filter(|s| !s.is_empty()),
            })
        } else {
            let auths: BTreeMap<String, AuthEntry> = serde_json::from_value(value)
                .map_err(|e| DockerConfigError::Legacy(Arc::new(e)))?;
            Ok(Self {
                auths: auths.into_iter().map(|(k, v)| (k, v.into())).collect(),
                ..Self::default()
            })
        }
    }

    /// Looks up `host` (a registry host with port, e.g. `ghcr.io`,
    /// `index.docker.io`, `127.0.0.1:5000`) the way the Docker CLI does:
    /// `credHelpers[host]`, then `credsStore`, then `auths` — the exact key
    /// first, then any key whose host ([`docker_config_key_host`]) equals
    /// the normalised `host` (first in key order when several do).
    ///
    /// With `use_helpers = false` (a Kubernetes pull secret, which kubelet
    /// reads the same way) only `auths` is consulted.
    ///
    /// Errors: a matching entry with a bad `auth` field or only an
    /// `identitytoken`.
    pub fn lookup(
        &self,
        host: &str,
        use_helpers: bool,
    ) -> Result<CredentialLookup, DockerConfigError> {
        let host = normalize_registry_host(host);
        if use_helpers {
            let helper = self.cred_helpers.get(host).or_else(|| {
                self.cred_helpers
                    .iter()
                    .find(|(k, _)| docker_config_key_host(k) == host)
                    .map(|(_, v)| v)
            });
            if let Some(h) = helper.filter(|h| !h.is_empty()) {
                return Ok(CredentialLookup::Helper(h.clone()));
            }
            if let Some(store) = &self.creds_store {
                return Ok(CredentialLookup::Helper(store.clone()));
            }
        }
        let entry = self.auths.get_key_value(host).or_else(|| {
            self.auths
                .iter()
                .find(|(k, _)| docker_config_key_host(k) == host)
        });
        let Some((key, entry)) = entry else {
            return Ok(CredentialLookup::NotConfigured);
        };
        let credential = entry_credential(key, entry)?;
        Ok(match credential {
            Some(credential) => CredentialLookup::Found {
                key: key.clone(),
                credential,
            },
            None => CredentialLookup::NotConfigured,
        })
    }
}

/// The credential an `auths` entry holds: `registrytoken`, else `auth`
/// (base64 `user:password`, which wins over separate fields as in Docker),
/// else `username`+`password`. `Ok(None)` for an empty entry.
fn entry_credential(
    key: &str,
    e: &AuthEntryOwned,
) -> Result<Option<RegistryCredential>, DockerConfigError> {
    if let Some(t) = e.registrytoken.as_ref().filter(|t| !t.is_empty()) {
        return Ok(Some(RegistryCredential::Bearer(t.clone())));
    }
    if let Some(a) = e.auth.as_ref().filter(|a| !a.is_empty()) {
        let bad = || DockerConfigError::BadAuth {
            key: key.to_string(),
        };
        let trimmed = a.trim().trim_end_matches('=');
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(trimmed)
            .map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let (u, p) = text.split_once(':').ok_or_else(bad)?;
        return Ok(Some(RegistryCredential::Basic {
            username: u.to_string(),
            password: p.to_string(),
        }));
    }
    match (&e.username, &e.password) {
        (Some(u), Some(p)) if !u.is_empty() => Ok(Some(RegistryCredential::Basic {
            username: u.clone(),
            password: p.clone(),
        })),
        _ if e.identitytoken.as_ref().is_some_and(|t| !t.is_empty()) => {
            Err(DockerConfigError::IdentityTokenUnsupported {
                key: key.to_string(),
            })
        }
        _ => Ok(None),
    }
}

/// Why an image config yields no entrypoint.
///
/// Not comparable: [`EntrypointError::Parse`] keeps the JSON decoder's
/// error as its source.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EntrypointError {
    /// The config blob is not JSON of the expected shape; the decoder's
    /// error (with line and column) is the source.
    #[error("the image config is not valid JSON: {0}")]
    Parse(#[source] Arc<serde_json::Error>),
    /// Neither `Entrypoint` nor `Cmd` is set: nothing to run.
    #[error("the image config sets neither Entrypoint nor Cmd")]
    Missing,
}

/// The argv a container runtime runs for an image config (the JSON blob a
/// manifest's `config` descriptor points at): `Entrypoint` followed by
/// `Cmd`, or `Cmd` alone when there is no `Entrypoint`.
///
/// Porch takes `Entrypoint` and drops `Cmd` when both are set (spec §6.1,
/// §10 item 17); this follows Docker instead. Errors: unparsable JSON, or
/// an empty result ([`EntrypointError::Missing`]).
pub fn entrypoint_from_config(config_json: &[u8]) -> Result<Vec<String>, EntrypointError> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        config: Option<Cfg>,
    }
    #[derive(Deserialize)]
    struct Cfg {
        #[serde(default, rename = "Entrypoint")]
        entrypoint: Option<Vec<String>>,
        #[serde(default, rename = "Cmd")]
        cmd: Option<Vec<String>>,
    }
    let file: File =
        serde_json::from_slice(config_json).map_err(|e| EntrypointError::Parse(Arc::new(e)))?;
    let cfg = file.config.unwrap_or(Cfg {
        entrypoint: None,
        cmd: None,
    });
    let mut argv = cfg.entrypoint.unwrap_or_default();
    argv.extend(cfg.cmd.unwrap_or_default());
    if argv.is_empty() {
        return Err(EntrypointError::Missing);
    }
    Ok(argv)
}

/// An OCI platform: `os/architecture[/variant]`, with Go's names
/// (`linux/amd64`, `linux/arm64/v8`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Platform {
    /// Operating system, e.g. `linux`.
    pub os: String,
    /// CPU architecture, e.g. `amd64`, `arm64`.
    pub architecture: String,
    /// CPU variant, e.g. `v8`, `v7`; `None` when unspecified.
    pub variant: Option<String>,
}

impl Platform {
    /// `linux/amd64`: what Porch's registry client selects (spec §6.1).
    pub fn linux_amd64() -> Self {
        Self {
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
        }
    }

    /// Linux on the architecture this process runs on, in Go's names
    /// (`x86_64` → `amd64`, `aarch64` → `arm64`, …).
    pub fn current_linux() -> Self {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "arm" => "arm",
            "powerpc64" => "ppc64le",
            "s390x" => "s390x",
            "riscv64" => "riscv64",
            other => other,
        };
        Self {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: None,
        }
    }

    /// Parses `os/arch` or `os/arch/variant`. Errors name the input.
    pub fn parse(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [os, arch] if !os.is_empty() && !arch.is_empty() => Ok(Self {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, v] if !os.is_empty() && !arch.is_empty() && !v.is_empty() => Ok(Self {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(v.to_string()),
            }),
            _ => Err(format!(
                "invalid platform {s:?}: expected os/arch or os/arch/variant"
            )),
        }
    }

    /// The variant with the OCI defaults filled in (`arm64` → `v8`).
    fn effective_variant(&self) -> Option<&str> {
        match (self.architecture.as_str(), self.variant.as_deref()) {
            (_, Some(v)) => Some(v),
            ("arm64", None) => Some("v8"),
            _ => None,
        }
    }
}

impl fmt::Display for Platform {
    /// `os/arch` or `os/arch/variant`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// Picks the manifest for `want` out of an index's `(platform, digest)`
/// entries: os and architecture must match; a wanted variant must match
/// (with `arm64` meaning `v8` when unset), and without a wanted variant the
/// first entry of the right os/architecture is taken. Entries without a
/// platform are skipped. `None` when nothing matches.
pub fn select_platform<'a>(
    entries: impl IntoIterator<Item = (Option<Platform>, &'a str)>,
    want: &Platform,
) -> Option<&'a str> {
    let candidates: Vec<(Platform, &'a str)> = entries
        .into_iter()
        .filter_map(|(p, d)| p.map(|p| (p, d)))
        .filter(|(p, _)| p.os == want.os && p.architecture == want.architecture)
        .collect();
    if want.variant.is_some() {
        candidates
            .iter()
            .find(|(p, _)| p.effective_variant() == want.effective_variant())
            .map(|(_, d)| *d)
    } else {
        candidates
            .iter()
            .find(|(p, _)| p.effective_variant() == want.effective_variant())
            .or(candidates.first())
            .map(|(_, d)| *d)
    }
}

/// The PEM `CERTIFICATE` blocks of a CA bundle, each as its own PEM text,
/// in file order. Other blocks (keys, CRLs) are ignored; an empty result
/// means the file holds no certificate (Porch: "failed to append
/// certificates from PEM").
pub fn split_pem_certificates(pem: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let after = &rest[start..];
        let Some(end) = after.find(END) else { break };
        out.push(format!("{}\n", &after[..end + END.len()]));
        rest = &after[end + END.len()..];
    }
    out
}

/// How image metadata is cached and fetched.
///
/// Digest → metadata entries never expire (content-addressed, immutable);
/// tag → digest entries expire after `tag_ttl` so a moved tag is noticed
/// (Porch caches tags forever, spec §10 item 19); every fetch is bounded by
/// `fetch_timeout` (Porch has none, §10 item 15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePolicy {
    /// How long a tag's digest is trusted before the registry is asked
    /// again (one `HEAD` request). Default 5 min.
    pub tag_ttl: Duration,
    /// Upper bound on one fetch (tag resolution, or manifest + config),
    /// including a TLS fallback attempt. Default 30 s.
    pub fetch_timeout: Duration,
    /// Upper bound on the TCP/TLS connect phase of one request. Default 10 s.
    pub connect_timeout: Duration,
    /// Most entries kept in each of the two caches. Default 10 000.
    pub max_entries: u64,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            tag_ttl: Duration::from_secs(300),
            fetch_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_entries: 10_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn basic(u: &str, p: &str) -> RegistryCredential {
        RegistryCredential::Basic {
            username: u.into(),
            password: p.into(),
        }
    }

    #[test]
    fn config_keys_map_to_hosts_like_docker() {
        for (key, host) in [
            ("https://index.docker.io/v1/", "index.docker.io"),
            ("index.docker.io", "index.docker.io"),
            ("docker.io", "index.docker.io"),
            ("https://registry-1.docker.io/v2/", "index.docker.io"),
            ("ghcr.io", "ghcr.io"),
            ("https://ghcr.io", "ghcr.io"),
            ("ghcr.io/kptdev/catalog", "ghcr.io"),
            ("http://127.0.0.1:5000/v2/", "127.0.0.1:5000"),
            ("localhost:5000", "localhost:5000"),
        ] {
            assert_eq!(docker_config_key_host(key), host, "{key}");
        }
    }

    #[test]
    fn lookup_matches_scheme_keys_and_bare_hosts() {
        let cfg = format!(
            r#"{{"auths": {{
                "https://index.docker.io/v1/": {{"auth": "{}"}},
                "ghcr.io": {{"username": "g", "password": "gp"}},
                "http://127.0.0.1:5000/v2/": {{"auth": "{}"}},
                "empty.example": {{}}
            }}}}"#,
            b64("hub:hp"),
            b64("local:lp:with:colons")
        );
        let c = DockerConfig::parse(cfg.as_bytes()).unwrap();
        let found = |host: &str| match c.lookup(host, true).unwrap() {
            CredentialLookup::Found { credential, .. } => credential,
            other => panic!("{host}: {other:?}"),
        };
        assert_eq!(found("index.docker.io"), basic("hub", "hp"));
        assert_eq!(found("docker.io"), basic("hub", "hp"));
        assert_eq!(found("ghcr.io"), basic("g", "gp"));
        assert_eq!(found("127.0.0.1:5000"), basic("local", "lp:with:colons"));
        assert_eq!(
            c.lookup("quay.io", true).unwrap(),
            CredentialLookup::NotConfigured
        );
        assert_eq!(
            c.lookup("empty.example", true).unwrap(),
            CredentialLookup::NotConfigured
        );
    }

    #[test]
    fn exact_key_wins_and_helpers_come_first_like_the_docker_cli() {
        let cfg = format!(
            r#"{{"auths": {{"https://ghcr.io/": {{"auth": "{}"}}, "ghcr.io": {{"auth": "{}"}}}},
                "credHelpers": {{"gcr.io": "gcloud"}}, "credsStore": "desktop"}}"#,
            b64("a:1"),
            b64("b:2")
        );
        let c = DockerConfig::parse(cfg.as_bytes()).unwrap();
        assert_eq!(
            c.lookup("gcr.io", true).unwrap(),
            CredentialLookup::Helper("gcloud".into())
        );
        assert_eq!(
            c.lookup("ghcr.io", true).unwrap(),
            CredentialLookup::Helper("desktop".into())
        );
        // A pull secret: helpers are not consulted; the exact key wins.
        assert_eq!(
            c.lookup("ghcr.io", false).unwrap(),
            CredentialLookup::Found {
                key: "ghcr.io".into(),
                credential: basic("b", "2")
            }
        );
    }

    #[test]
    fn tokens_legacy_format_and_errors() {
        let c = DockerConfig::parse(br#"{"r.io": {"registrytoken": "tok"}}"#).unwrap();
        assert!(matches!(
            c.lookup("r.io", false).unwrap(),
            CredentialLookup::Found { credential: RegistryCredential::Bearer(t), .. } if t == "tok"
        ));
        let c = DockerConfig::parse(br#"{"auths": {"r.io": {"identitytoken": "x"}}}"#).unwrap();
        assert!(matches!(
            c.lookup("r.io", false),
            Err(DockerConfigError::IdentityTokenUnsupported { .. })
        ));
        let c = DockerConfig::parse(br#"{"auths": {"r.io": {"auth": "!!"}}}"#).unwrap();
        assert!(matches!(
            c.lookup("r.io", false),
            Err(DockerConfigError::BadAuth { .. })
        ));
        assert!(matches!(
            DockerConfig::parse(b"[1]"),
            Err(DockerConfigError::NotAnObject)
        ));
        let err = DockerConfig::parse(b"not json").unwrap_err();
        let source = std::error::Error::source(&err).expect("the decoder's error is kept");
        assert!(source.is::<Arc<serde_json::Error>>());
        assert!(
            err.to_string()
                .starts_with("not a Docker config JSON: expected ident at line 1 column 2"),
            "{err}"
        );
        let err = DockerConfig::parse(br#"{"r.io": 1}"#).unwrap_err();
        assert!(matches!(err, DockerConfigError::Legacy(_)), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
        assert_eq!(DockerConfig::parse(b"{}").unwrap(), DockerConfig::default());
    }

    #[test]
    fn credentials_never_print_secrets() {
        let text = format!("{:?}", basic("me", "s3cret"));
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!format!("{:?}", RegistryCredential::Bearer("xyzzy".into())).contains("xyzzy"));
    }

    #[test]
    fn entrypoint_is_the_full_argv() {
        let both = br#"{"config": {"Entrypoint": ["/fn"], "Cmd": ["--serve"]}}"#;
        assert_eq!(entrypoint_from_config(both).unwrap(), ["/fn", "--serve"]);
        let cmd = br#"{"config": {"Entrypoint": null, "Cmd": ["/bin/sh", "-c", "x"]}}"#;
        assert_eq!(entrypoint_from_config(cmd).unwrap(), ["/bin/sh", "-c", "x"]);
        let ep = br#"{"architecture": "amd64", "config": {"Entrypoint": ["/fn"]}}"#;
        assert_eq!(entrypoint_from_config(ep).unwrap(), ["/fn"]);
        assert!(matches!(
            entrypoint_from_config(br#"{"config": {}}"#),
            Err(EntrypointError::Missing)
        ));
        assert!(matches!(
            entrypoint_from_config(br#"{}"#),
            Err(EntrypointError::Missing)
        ));
        let err = entrypoint_from_config(b"nope").unwrap_err();
        assert!(matches!(err, EntrypointError::Parse(_)));
        let source = std::error::Error::source(&err).expect("the decoder's error is kept");
        assert!(source.is::<Arc<serde_json::Error>>());
        assert_eq!(
            err.to_string(),
            format!("the image config is not valid JSON: {source}")
        );
    }

    #[test]
    fn platform_selection() {
        let p = |s: &str| Some(Platform::parse(s).unwrap());
        let entries = vec![
            (None, "sha256:none"),
            (p("linux/arm/v7"), "sha256:armv7"),
            (p("linux/arm64/v8"), "sha256:arm64"),
            (p("linux/amd64"), "sha256:amd64"),
            (p("windows/amd64"), "sha256:win"),
        ];
        let pick = |want: &str| select_platform(entries.clone(), &Platform::parse(want).unwrap());
        assert_eq!(pick("linux/amd64"), Some("sha256:amd64"));
        assert_eq!(pick("linux/arm64"), Some("sha256:arm64"));
        assert_eq!(pick("linux/arm64/v8"), Some("sha256:arm64"));
        assert_eq!(pick("linux/arm/v7"), Some("sha256:armv7"));
        assert_eq!(pick("linux/arm/v6"), None);
        assert_eq!(pick("linux/s390x"), None);
        assert_eq!(Platform::linux_amd64().to_string(), "linux/amd64");
        assert!(Platform::parse("linux").is_err());
        assert_eq!(Platform::current_linux().os, "linux");
    }

    #[test]
    fn pem_bundles_are_split() {
        let one = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----";
        let two = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----";
        let bundle = format!(
            "junk\n{one}\n-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n{two}\n"
        );
        let certs = split_pem_certificates(&bundle);
        assert_eq!(certs, [format!("{one}\n"), format!("{two}\n")]);
        assert!(split_pem_certificates("nothing here").is_empty());
    }
}
