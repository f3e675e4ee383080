//! The OCI registry adapter: [`OciImageInspector`] reads function images'
//! digest and entrypoint with oci-client, and [`PullSecretSync`] keeps the
//! registry pull secret in the pod namespace.
//!
//! Behaviour (Porch `getImageMetadata`, spec §6, without the defects of
//! §10 items 15, 19, 20 and 21):
//! - short names get the default image prefix, references are
//!   Docker-normalised ([`crate::domain::image`]);
//! - tag → digest is one `HEAD` request, cached for
//!   [`CachePolicy::tag_ttl`]; digest → metadata (manifest, platform
//!   selection out of an index, config blob) is cached for the process
//!   lifetime; concurrent misses for one key share one fetch (moka's
//!   `try_get_with`); every fetch is bounded by [`CachePolicy::fetch_timeout`];
//! - credentials: the `--registry-auth-secret-path` Docker config JSON when
//!   private registries are enabled and it has an entry for the registry,
//!   else the default Docker chain (`$DOCKER_CONFIG/config.json` or
//!   `~/.docker/config.json`, credential helpers included), else anonymous;
//!   keys match the way Docker matches them; token exchange after a 401
//!   challenge is done by oci-client; one client per (registry, credential);
//! - TLS: the CA in `--tls-secret-path` (`ca.crt`, else `ca.pem`) is added to
//!   the system roots; rustls never negotiates below TLS 1.2; only a TLS
//!   handshake or certificate failure makes the inspector retry with the
//!   default transport, and the error lists what was tried.

mod credentials;
mod pull_secret;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use oci_client::manifest::OciManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::sync::OnceCell;

pub use pull_secret::{PullSecretError, PullSecretOutcome, PullSecretSync};
pub use transport::CaError;

use crate::domain::image::{ImageRef, resolve_image};
use crate::domain::registry::{
    CachePolicy, Platform, RegistryCredential, entrypoint_from_config, select_platform,
};
use crate::ports::{ImageInspectError, ImageInspector, ImageMetadata, TagLister};
use credentials::{CredentialSources, Resolved, default_docker_config_path};
use transport::{Class, ClientPool, ClientSettings, CustomCa, Transport};

/// Largest image config blob read, in bytes (real ones are a few KiB).
const MAX_CONFIG_BYTES: i64 = 4 << 20;

/// How an [`OciImageInspector`] finds and reads images.
#[derive(Debug, Clone)]
pub struct InspectorConfig {
    /// Prefix for names without `/` (`--default-image-prefix`).
    pub default_image_prefix: String,
    /// The platform selected out of multi-arch indexes. Default
    /// `linux/amd64`, as Porch; [`Platform::current_linux`] is the runner's own.
    pub platform: Platform,
    /// Cache TTL, fetch and connect timeouts, cache size.
    pub cache: CachePolicy,
    /// The Docker config JSON of private registries
    /// (`--registry-auth-secret-path`); `Some` only with
    /// `--enable-private-registries`.
    pub registry_auth_secret_path: Option<PathBuf>,
    /// The directory holding `ca.crt` or `ca.pem` (`--tls-secret-path`);
    /// `Some` only with `--enable-private-registries-tls`.
    pub tls_secret_path: Option<PathBuf>,
    /// The default chain's Docker config file; default
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub docker_config_path: Option<PathBuf>,
    /// Registries (`host:port`) reached over plain HTTP instead of HTTPS,
    /// e.g. a test registry on loopback.
    pub plain_http_registries: Vec<String>,
}

impl InspectorConfig {
    /// Defaults: `linux/amd64`, [`CachePolicy::default`], no private
    /// registries, no custom CA, the Docker config from the environment.
    pub fn new(default_image_prefix: &str) -> Self {
        Self {
            default_image_prefix: default_image_prefix.to_string(),
            platform: Platform::linux_amd64(),
            cache: CachePolicy::default(),
            registry_auth_secret_path: None,
            tls_secret_path: None,
            docker_config_path: default_docker_config_path(),
            plain_http_registries: Vec::new(),
        }
    }

    /// Applies Porch's registry flags: the secret file is used only with
    /// `enable_private_registries`, and the CA directory only with both
    /// `enable_private_registries` and `enable_private_registries_tls`
    /// (spec §6.4).
    pub fn with_registry_flags(
        mut self,
        enable_private_registries: bool,
        registry_auth_secret_path: PathBuf,
        enable_private_registries_tls: bool,
        tls_secret_path: PathBuf,
    ) -> Self {
        self.registry_auth_secret_path =
            enable_private_registries.then_some(registry_auth_secret_path);
        self.tls_secret_path =
            (enable_private_registries && enable_private_registries_tls).then_some(tls_secret_path);
        self
    }
}

/// Metadata of one platform manifest, cached by manifest digest.
#[derive(Debug)]
struct PlatformMetadata {
    platform_digest: String,
    entrypoint: Vec<String>,
}

/// One inspection: the image and registry for error messages, and the
/// credential resolved at most once.
struct Ctx {
    image: String,
    registry: String,
    parsed: ImageRef,
    credential: OnceCell<Resolved>,
}

impl Ctx {
    /// The context of one operation on `parsed`, credentials not yet resolved.
    fn new(parsed: ImageRef) -> Self {
        Self {
            image: parsed.to_string(),
            registry: parsed.registry_host().to_string(),
            parsed,
            credential: OnceCell::new(),
        }
    }

    fn err_not_found(&self, detail: String) -> ImageInspectError {
        ImageInspectError::NotFound {
            image: self.image.clone(),
            registry: self.registry.clone(),
            detail,
        }
    }
}

/// A failure of one attempt, before it is turned into an
/// [`ImageInspectError`].
enum OpError {
    Client(oci_client::errors::OciDistributionError),
    NoPlatform { available: String },
    Invalid(String),
}

impl From<oci_client::errors::OciDistributionError> for OpError {
    fn from(e: oci_client::errors::OciDistributionError) -> Self {
        OpError::Client(e)
    }
}

/// [`ImageInspector`] over OCI registries with oci-client (see the module
/// documentation for the rules).
pub struct OciImageInspector {
    prefix: String,
    platform: Platform,
    policy: CachePolicy,
    credentials: CredentialSources,
    pool: ClientPool,
    tags: moka::future::Cache<String, String>,
    metadata: moka::future::Cache<String, Arc<PlatformMetadata>>,
}

impl std::fmt::Debug for OciImageInspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciImageInspector")
            .field("prefix", &self.prefix)
            .field("platform", &self.platform)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl OciImageInspector {
    /// Builds an inspector. Reads the CA from `config.tls_secret_path` now,
    /// so a missing or unusable CA fails at start-up.
    ///
    /// Errors: [`CaError`] — the directory cannot be read (any error, not
    /// only "not found", unlike Porch, spec §10 item 21), neither `ca.crt`
    /// nor `ca.pem` exists, or the file holds no usable certificate.
    pub fn new(config: InspectorConfig) -> Result<Self, CaError> {
        let ca = config
            .tls_secret_path
            .as_deref()
            .map(CustomCa::load)
            .transpose()?;
        let policy = config.cache.clone();
        Ok(Self {
            prefix: config.default_image_prefix,
            platform: config.platform,
            credentials: CredentialSources {
                secret_path: config.registry_auth_secret_path,
                docker_config: config.docker_config_path,
            },
            pool: ClientPool::new(
                ClientSettings {
                    connect_timeout: policy.connect_timeout,
                    read_timeout: policy.fetch_timeout,
                    plain_http: config.plain_http_registries,
                },
                ca,
            ),
            tags: moka::future::Cache::builder()
                .max_capacity(policy.max_entries)
                .time_to_live(policy.tag_ttl)
                .build(),
            metadata: moka::future::Cache::builder()
                .max_capacity(policy.max_entries)
                .build(),
            policy,
        })
    }

    async fn credential<'a>(&self, ctx: &'a Ctx) -> Result<&'a Resolved, ImageInspectError> {
        ctx.credential
            .get_or_try_init(|| self.credentials.resolve(&ctx.registry))
            .await
            .map_err(|e| ImageInspectError::Credentials {
                image: ctx.image.clone(),
                registry: ctx.registry.clone(),
                source_name: e.source_name,
                detail: e.detail,
            })
    }

    /// Runs `op` on each transport in turn until one succeeds or fails with
    /// something other than a TLS error; bounded by the fetch timeout.
    async fn run<T, F, Fut>(&self, ctx: &Ctx, op: F) -> Result<T, ImageInspectError>
    where
        F: Fn(Client, RegistryAuth) -> Fut,
        Fut: Future<Output = Result<T, OpError>>,
    {
        let attempt = async {
            let resolved = self.credential(ctx).await?;
            let auth = transport::registry_auth(&resolved.credential);
            let mut tried = Vec::new();
            for &transport in self.pool.transports() {
                let what = match (transport, self.pool.ca()) {
                    (Transport::CustomCa, Some(ca)) => {
                        format!("system roots + CA from {}", ca.file.display())
                    }
                    _ => "system roots only".to_string(),
                };
                let client = match self
                    .pool
                    .client(&ctx.registry, transport, &resolved.credential)
                {
                    Ok(c) => c,
                    Err(e) => {
                        tried.push(format!("{what}: {}", transport::error_chain(&e)));
                        continue;
                    }
                };
                match op(client, auth.clone()).await {
                    Ok(v) => return Ok(v),
                    Err(OpError::Client(e)) if transport::is_tls_error(&e) => {
                        tracing::warn!(
                            image = %ctx.image,
                            "TLS failure with {what}: {}",
                            transport::error_chain(&e)
                        );
                        tried.push(format!("{what}: {}", transport::error_chain(&e)));
                    }
                    Err(e) => return Err(self.convert(ctx, resolved, e)),
                }
            }
            Err(self.tls_error(ctx, tried))
        };
        match tokio::time::timeout(self.policy.fetch_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(ImageInspectError::Timeout {
                image: ctx.image.clone(),
                registry: ctx.registry.clone(),
                after: self.policy.fetch_timeout,
            }),
        }
    }

    fn tls_error(&self, ctx: &Ctx, tried: Vec<String>) -> ImageInspectError {
        let hint = match self.pool.ca() {
            Some(ca) => format!(
                "check that {} holds the CA that signed the certificate of {} and that the certificate is valid for that host name",
                ca.file.display(),
                ctx.registry
            ),
            None => format!(
                "if {} uses a certificate from a private CA, start the runner with --enable-private-registries --enable-private-registries-tls and put the CA certificate as ca.crt or ca.pem in the --tls-secret-path directory",
                ctx.registry
            ),
        };
        ImageInspectError::Tls {
            image: ctx.image.clone(),
            registry: ctx.registry.clone(),
            tried: tried.join("; "),
            hint,
        }
    }

    fn convert(&self, ctx: &Ctx, resolved: &Resolved, e: OpError) -> ImageInspectError {
        let image = ctx.image.clone();
        let registry = ctx.registry.clone();
        match e {
            OpError::NoPlatform { available } => ImageInspectError::NoMatchingPlatform {
                image,
                registry,
                platform: self.platform.to_string(),
                available,
            },
            OpError::Invalid(detail) => ImageInspectError::InvalidImage {
                image,
                registry,
                detail,
            },
            OpError::Client(e) => match transport::classify(&e) {
                Class::NotFound(detail) => ctx.err_not_found(detail),
                Class::Unauthorized(detail) => {
                    let hint = match &resolved.credential {
                        RegistryCredential::Anonymous => format!(
                            "the registry needs credentials: add an entry for {registry} to the Docker config JSON at --registry-auth-secret-path (with --enable-private-registries) or to the runner's Docker config"
                        ),
                        _ => format!(
                            "check the credentials for {registry}, and that they may pull this repository"
                        ),
                    };
                    ImageInspectError::Unauthorized {
                        image,
                        registry,
                        credential: resolved.description.clone(),
                        detail,
                        hint,
                    }
                }
                Class::Transient(detail) => ImageInspectError::Transient {
                    image,
                    registry,
                    detail,
                },
                Class::InvalidImage(detail) => ImageInspectError::InvalidImage {
                    image,
                    registry,
                    detail,
                },
                Class::InvalidReference(reason) => {
                    ImageInspectError::InvalidReference { image, reason }
                }
                Class::Other(detail) => ImageInspectError::Other {
                    image,
                    registry,
                    detail,
                },
            },
        }
    }

    /// Tag → manifest digest: one `HEAD` (oci-client falls back to `GET`).
    async fn fetch_digest(&self, ctx: &Ctx, tag: &str) -> Result<String, ImageInspectError> {
        let reference = Reference::with_tag(
            ctx.parsed.registry.clone(),
            ctx.parsed.repository.clone(),
            tag.to_string(),
        );
        self.run(ctx, |client, auth| {
            let reference = reference.clone();
            async move { Ok(client.fetch_manifest_digest(&reference, &auth).await?) }
        })
        .await
    }

    /// Digest → platform manifest and entrypoint.
    async fn fetch_metadata(
        &self,
        ctx: &Ctx,
        digest: &str,
    ) -> Result<PlatformMetadata, ImageInspectError> {
        let reference = Reference::with_digest(
            ctx.parsed.registry.clone(),
            ctx.parsed.repository.clone(),
            digest.to_string(),
        );
        let platform = &self.platform;
        self.run(ctx, |client, auth| {
            let reference = reference.clone();
            async move { read_platform_metadata(&client, &reference, &auth, platform).await }
        })
        .await
    }
}

fn domain_platform(p: &oci_client::manifest::Platform) -> Platform {
    Platform {
        os: p.os.to_string(),
        architecture: p.architecture.to_string(),
        variant: p.variant.clone(),
    }
}

/// Reads the manifest at `reference` (a digest reference), selects
/// `platform` out of an index, and reads the config's entrypoint.
async fn read_platform_metadata(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
    platform: &Platform,
) -> Result<PlatformMetadata, OpError> {
    let digest = reference.digest().unwrap_or_default().to_string();
    let (manifest, _) = client.pull_manifest(reference, auth).await?;
    let (manifest, platform_digest, platform_ref) = match manifest {
        OciManifest::Image(m) => (m, digest, reference.clone()),
        OciManifest::ImageIndex(index) => {
            let entries = index
                .manifests
                .iter()
                .map(|e| (e.platform.as_ref().map(domain_platform), e.digest.as_str()));
            let Some(chosen) = select_platform(entries, platform) else {
                let available: Vec<String> = index
                    .manifests
                    .iter()
                    .filter_map(|e| e.platform.as_ref().map(|p| domain_platform(p).to_string()))
                    .collect();
                return Err(OpError::NoPlatform {
                    available: if available.is_empty() {
                        "no platforms".into()
                    } else {
                        available.join(", ")
                    },
                });
            };
            let chosen = chosen.to_string();
            let platform_ref = reference.clone_with_digest(chosen.clone());
            match client.pull_manifest(&platform_ref, auth).await? {
                (OciManifest::Image(m), _) => (m, chosen, platform_ref),
                (OciManifest::ImageIndex(_), _) => {
                    return Err(OpError::Invalid(format!(
                        "the index entry {chosen} for {platform} is itself an index"
                    )));
                }
            }
        }
    };
    if manifest.config.size > MAX_CONFIG_BYTES {
        return Err(OpError::Invalid(format!(
            "the image config is {} bytes, more than the {MAX_CONFIG_BYTES} accepted",
            manifest.config.size
        )));
    }
    let mut config = Vec::new();
    client
        .pull_blob(&platform_ref, &manifest.config, &mut config)
        .await?;
    let entrypoint =
        entrypoint_from_config(&config).map_err(|e| OpError::Invalid(e.to_string()))?;
    Ok(PlatformMetadata {
        platform_digest,
        entrypoint,
    })
}

#[async_trait]
impl ImageInspector for OciImageInspector {
    /// See [`ImageInspector::inspect`]; logs Porch's
    /// `getting image metadata for <image> took <d>` on every cache miss.
    async fn inspect(&self, image: &str) -> Result<ImageMetadata, ImageInspectError> {
        let resolved = resolve_image(image, &self.prefix);
        let parsed =
            ImageRef::parse(&resolved).map_err(|e| ImageInspectError::InvalidReference {
                image: image.to_string(),
                reason: e.reason,
            })?;
        let ctx = Ctx::new(parsed);
        let started = Instant::now();
        let mut missed = false;
        let digest = match (&ctx.parsed.digest, &ctx.parsed.tag) {
            (Some(d), _) => d.clone(),
            (None, tag) => {
                let tag = tag.as_deref().unwrap_or("latest");
                self.tags
                    .try_get_with(ctx.image.clone(), async {
                        missed = true;
                        self.fetch_digest(&ctx, tag).await
                    })
                    .await
                    .map_err(|e| (*e).clone())?
            }
        };
        let key = format!(
            "{}/{}@{digest}",
            ctx.parsed.registry_host(),
            ctx.parsed.repository
        );
        let meta = self
            .metadata
            .try_get_with(key, async {
                missed = true;
                self.fetch_metadata(&ctx, &digest).await.map(Arc::new)
            })
            .await
            .map_err(|e| (*e).clone())?;
        if missed {
            tracing::info!(
                "getting image metadata for {} took {:?}",
                ctx.image,
                started.elapsed()
            );
        }
        Ok(ImageMetadata {
            image: ctx.image.clone(),
            registry: ctx.registry.clone(),
            digest,
            platform_digest: meta.platform_digest.clone(),
            entrypoint: meta.entrypoint.clone(),
        })
    }

    /// [`TagLister::list_tags`] with the same client.
    async fn repository_tags(&self, repository: &str) -> Result<Vec<String>, String> {
        TagLister::list_tags(self, repository).await
    }
}

/// Tags listed per request of the registry's tag list (the OCI
/// distribution API pages with `n` and `last`).
const TAG_PAGE: usize = 1000;

#[async_trait]
impl TagLister for OciImageInspector {
    /// The registry's tag list for `repository` (all pages), with the same
    /// credentials, transports and plain-HTTP registries as
    /// [`ImageInspector::inspect`]; for kpt's `tag` semver constraints.
    async fn list_tags(&self, repository: &str) -> Result<Vec<String>, String> {
        let parsed = ImageRef::parse(repository).map_err(|e| e.to_string())?;
        let ctx = Ctx::new(parsed);
        let reference = Reference::with_tag(
            ctx.parsed.registry.clone(),
            ctx.parsed.repository.clone(),
            "latest".to_string(),
        );
        let mut tags: Vec<String> = Vec::new();
        loop {
            let last = tags.last().cloned();
            let page = self
                .run(&ctx, |client, auth| {
                    let (reference, last) = (reference.clone(), last.clone());
                    async move {
                        Ok(client
                            .list_tags(&reference, &auth, Some(TAG_PAGE), last.as_deref())
                            .await?
                            .tags)
                    }
                })
                .await
                .map_err(|e| e.to_string())?;
            let full = page.len() >= TAG_PAGE;
            let before = tags.len();
            tags.extend(page.into_iter().filter(|t| Some(t) != last.as_ref()));
            if !full || tags.len() == before {
                return Ok(tags);
            }
        }
    }
}
