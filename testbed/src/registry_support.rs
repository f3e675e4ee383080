//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry) on 127.0.0.1 with an ephemeral port, optionally
//! with htpasswd basic auth and TLS from a CA generated here; plus helpers
//! that push small images and multi-arch indexes with oci-client, and count
//! the runner's requests in the registry's access log.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::manifest::{
    IMAGE_CONFIG_MEDIA_TYPE, IMAGE_LAYER_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tempfile::TempDir;

/// The user agent prefix of the runner's requests (the adapter's `User-Agent`).
pub const RUNNER_AGENT: &str = "krm-fn-runner/";

/// How the registry is set up.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// htpasswd basic auth with this user and password.
    pub basic_auth: Option<(String, String)>,
    /// Serve HTTPS with a certificate from a CA generated for the test.
    pub tls: bool,
    /// A registry storage directory (docker-registry's filesystem layout)
    /// copied in before the start, so the registry serves its images at
    /// once (the real-node bed's images, scripts/build-node-images.sh).
    pub seed: Option<PathBuf>,
}

impl Setup {
    /// No auth, plain HTTP.
    pub fn anonymous() -> Self {
        Self::default()
    }

    /// Basic auth as `user`/`pass`, plain HTTP.
    pub fn basic(user: &str, pass: &str) -> Self {
        Self {
            basic_auth: Some((user.into(), pass.into())),
            ..Self::default()
        }
    }

    /// No auth, HTTPS.
    pub fn tls() -> Self {
        Self {
            tls: true,
            ..Self::default()
        }
    }

    /// Basic auth and HTTPS.
    pub fn tls_basic(user: &str, pass: &str) -> Self {
        Self {
            basic_auth: Some((user.into(), pass.into())),
            tls: true,
            seed: None,
        }
    }

    /// This setup, serving a copy of the registry storage `dir`.
    pub fn seeded(mut self, dir: &Path) -> Self {
        self.seed = Some(dir.to_path_buf());
        self
    }
}

/// Finds `tool` on PATH, or fails the test saying which package to install.
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(tool))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "`{tool}` is not installed; the registry tests need it. Install it with \
             `apt-get install -y {package}` (Debian/Ubuntu; .ci/run does this), then rerun"
        )
    })
}

use crate::common::run_checked as run;

/// Generates a CA (`ca.crt`, `ca.key`) in `dir` with the openssl CLI.
pub fn make_ca(dir: &Path, name: &str) {
    let openssl = require_tool("openssl", "openssl");
    std::fs::create_dir_all(dir).unwrap();
    run(Command::new(&openssl)
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-keyout", "ca.key", "-out", "ca.crt", "-subj"])
        .arg(format!("/CN={name}"))
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]));
}

/// Signs a server certificate for 127.0.0.1/localhost with the CA in `ca_dir`,
/// written as `server.crt`/`server.key` in `dir`.
fn make_server_cert(dir: &Path, ca_dir: &Path) {
    let openssl = require_tool("openssl", "openssl");
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(Command::new(&openssl)
        .current_dir(dir)
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-keyout", "server.key", "-out", "server.csr"])
        .args(["-subj", "/CN=127.0.0.1"]));
    run(Command::new(&openssl)
        .current_dir(dir)
        .args(["x509", "-req", "-in", "server.csr", "-CA"])
        .arg(ca_dir.join("ca.crt"))
        .arg("-CAkey")
        .arg(ca_dir.join("ca.key"))
        .args(["-CAcreateserial", "-days", "2", "-out", "server.crt"])
        .args(["-extfile", "ext.cnf"]));
}

/// A running registry; killed and reaped on drop.
pub struct TestRegistry {
    child: Child,
    dir: TempDir,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// The directory holding the CA as `ca.crt` (TLS setups).
    pub ca_dir: Option<PathBuf>,
    setup: Setup,
    access_log: PathBuf,
    stderr_log: PathBuf,
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestRegistry {
    /// Starts `docker-registry serve` with a config written here (never the
    /// packaged one) and waits until it listens.
    pub fn start(setup: Setup) -> Self {
        let registry = require_tool("docker-registry", "docker-registry");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:0\n  secret: krm-fn-runner-test\n",
            root.join("data").display()
        );
        let mut ca_dir = None;
        if setup.tls {
            let ca = root.join("ca");
            make_ca(&ca, "krm-fn-runner test CA");
            make_server_cert(root, &ca);
            // Only the certificate is handed to the runner.
            let public = root.join("tls-secret");
            std::fs::create_dir_all(&public).unwrap();
            std::fs::copy(ca.join("ca.crt"), public.join("ca.crt")).unwrap();
            ca_dir = Some(public);
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                root.join("server.crt").display(),
                root.join("server.key").display()
            ));
        }
        if let Some((user, pass)) = &setup.basic_auth {
            let htpasswd = require_tool("htpasswd", "apache2-utils");
            let out = Command::new(htpasswd)
                .args(["-Bbn", user, pass])
                .output()
                .expect("htpasswd runs");
            assert!(out.status.success(), "htpasswd failed");
            std::fs::write(root.join("htpasswd"), out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: krm-fn-runner-test\n    path: {}\n",
                root.join("htpasswd").display()
            ));
        }
        if let Some(seed) = &setup.seed {
            let status = Command::new("cp")
                .arg("-a")
                .arg(seed)
                .arg(root.join("data"))
                .status()
                .expect("run cp");
            assert!(
                status.success(),
                "copy the registry seed {}",
                seed.display()
            );
        }
        let config_path = root.join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let access_log = root.join("access.log");
        let stderr_log = root.join("registry.log");
        let child = Command::new(registry)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&access_log).unwrap())
            .stderr(std::fs::File::create(&stderr_log).unwrap())
            .spawn()
            .expect("docker-registry starts");
        let mut me = Self {
            child,
            dir,
            addr: String::new(),
            ca_dir,
            setup,
            access_log,
            stderr_log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(&me.stderr_log).unwrap_or_default();
            if let Some(i) = log.find("listening on ") {
                let rest = &log[i + "listening on ".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                    .unwrap_or(rest.len());
                me.addr = rest[..end].to_string();
                break;
            }
            if let Ok(Some(status)) = me.child.try_wait() {
                panic!("docker-registry exited with {status} before listening:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not start listening within 20 s:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        me
    }

    /// The scratch directory of this registry (for test files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a Docker config JSON (the `--registry-auth-secret-path` file)
    /// with `user`/`pass` for registry `key` into this registry's directory
    /// as `file`; returns its path.
    pub fn docker_config(&self, file: &str, key: &str, user: &str, pass: &str) -> PathBuf {
        let path = self.dir().join(file);
        let json = serde_json::json!({
            "auths": {key: {"username": user, "password": pass}}
        });
        std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
        path
    }

    /// The credential pushes use.
    pub fn push_auth(&self) -> RegistryAuth {
        match &self.setup.basic_auth {
            Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// A fresh oci-client client that trusts the test CA (used to push).
    pub fn push_client(&self) -> Client {
        let mut config = ClientConfig {
            protocol: if self.setup.tls {
                ClientProtocol::Https
            } else {
                ClientProtocol::Http
            },
            ..ClientConfig::default()
        };
        if let Some(dir) = &self.ca_dir {
            config.extra_root_certificates = vec![Certificate {
                encoding: CertificateEncoding::Pem,
                data: std::fs::read(dir.join("ca.crt")).unwrap(),
            }];
        }
        Client::try_from(config).expect("push client")
    }

    /// `repo:tag` on this registry as a reference.
    pub fn reference(&self, repo_tag: &str) -> Reference {
        format!("{}/{repo_tag}", self.addr)
            .parse()
            .expect("valid reference")
    }

    /// Pushes catalog function `function` as `<function>:<pinned version>`
    /// for amd64 with entrypoint `/usr/local/bin/function` (what the catalog
    /// images hold) and returns its reference on this registry.
    pub async fn push_catalog_function(&self, function: &str) -> String {
        let repo_tag = format!("{function}:{}", crate::common::catalog_version(function));
        self.push_image(
            &repo_tag,
            "amd64",
            Some(&["/usr/local/bin/function"]),
            None,
            function,
        )
        .await;
        format!("{}/{repo_tag}", self.addr)
    }

    /// Pushes a one-layer image for `linux/<arch>` whose config has
    /// `entrypoint` and `cmd`, tagged `repo_tag`; returns its manifest digest
    /// and size. `nonce` makes otherwise equal images differ.
    pub async fn push_image(
        &self,
        repo_tag: &str,
        arch: &str,
        entrypoint: Option<&[&str]>,
        cmd: Option<&[&str]>,
        nonce: &str,
    ) -> (String, usize) {
        let client = self.push_client();
        let auth = self.push_auth();
        let reference = self.reference(repo_tag);
        // An empty tar archive: two 512-byte zero blocks.
        let layer = ImageLayer::new(vec![0u8; 1024], IMAGE_LAYER_MEDIA_TYPE.to_string(), None);
        let config = serde_json::json!({
            "architecture": arch,
            "os": "linux",
            "config": {
                "Entrypoint": entrypoint,
                "Cmd": cmd,
                "Labels": {"test.nonce": nonce},
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.sha256_digest()]},
        });
        let config = Config::new(
            serde_json::to_vec(&config).unwrap(),
            IMAGE_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        client
            .push(&reference, &[layer], config, &auth, None)
            .await
            .expect("push image");
        self.digest_and_size(&client, &reference, OCI_IMAGE_MEDIA_TYPE)
            .await
    }

    async fn digest_and_size(
        &self,
        client: &Client,
        reference: &Reference,
        media_type: &str,
    ) -> (String, usize) {
        let (bytes, digest) = client
            .pull_manifest_raw(reference, &self.push_auth(), &[media_type])
            .await
            .expect("read back the manifest");
        (digest, bytes.len())
    }

    /// Pushes an OCI index tagged `repo_tag` listing `children`
    /// (`(arch, digest, size)` of `linux` image manifests in the same
    /// repository); returns the index digest.
    pub async fn push_index(&self, repo_tag: &str, children: &[(&str, &str, usize)]) -> String {
        let client = self.push_client();
        let reference = self.reference(repo_tag);
        let manifests: Vec<serde_json::Value> = children
            .iter()
            .map(|(arch, digest, size)| {
                serde_json::json!({
                    "mediaType": OCI_IMAGE_MEDIA_TYPE,
                    "digest": digest,
                    "size": size,
                    "platform": {"os": "linux", "architecture": arch},
                })
            })
            .collect();
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE,
            "manifests": manifests,
        });
        // Make sure the client is authenticated for pushes first.
        client
            .auth(
                &reference,
                &self.push_auth(),
                oci_client::RegistryOperation::Push,
            )
            .await
            .expect("auth for push");
        client
            .push_manifest_raw(
                &reference,
                serde_json::to_vec(&index).unwrap(),
                http::HeaderValue::from_static(OCI_IMAGE_INDEX_MEDIA_TYPE),
            )
            .await
            .expect("push index");
        self.digest_and_size(&client, &reference, OCI_IMAGE_INDEX_MEDIA_TYPE)
            .await
            .0
    }

    /// Tags the manifest `repo:from` also as `repo:to` in the same
    /// repository (a push of the same manifest bytes under another tag, as
    /// `crane tag` does), so one image answers several versions. Returns
    /// the manifest digest.
    pub async fn retag(&self, repo: &str, from: &str, to: &str) -> String {
        let client = self.push_client();
        let auth = self.push_auth();
        let source = self.reference(&format!("{repo}:{from}"));
        let (bytes, digest) = client
            .pull_manifest_raw(
                &source,
                &auth,
                &[
                    OCI_IMAGE_MEDIA_TYPE,
                    OCI_IMAGE_INDEX_MEDIA_TYPE,
                    "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                ],
            )
            .await
            .expect("read the manifest to retag");
        let media_type = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|m| m["mediaType"].as_str().map(str::to_string))
            .unwrap_or_else(|| OCI_IMAGE_MEDIA_TYPE.to_string());
        let target = self.reference(&format!("{repo}:{to}"));
        client
            .auth(&target, &auth, oci_client::RegistryOperation::Push)
            .await
            .expect("auth for push");
        client
            .push_manifest_raw(
                &target,
                bytes.to_vec(),
                http::HeaderValue::from_str(&media_type).expect("a media type"),
            )
            .await
            .expect("push the manifest under its new tag");
        digest
    }

    /// The access-log lines of the runner's requests (its user agent)
    /// whose request line contains `needle`, e.g. `/v2/fns/a/manifests/`.
    /// Waits briefly so that lines of requests just answered are written.
    pub fn runner_requests(&self, needle: &str) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(150));
        let mut text = String::new();
        std::fs::File::open(&self.access_log)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read the access log");
        text.lines()
            .filter(|l| l.contains(RUNNER_AGENT) && l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}
