//! The OCI image inspector against a real registry: Debian's
//! `docker-registry` started on 127.0.0.1 by each test, in four setups —
//! anonymous, htpasswd basic auth, TLS from a CA the test generates, and
//! both. Images (a config with Entrypoint/Cmd and one layer, and multi-arch
//! indexes) are pushed with oci-client; requests are counted in the
//! registry's access log by the runner's user agent.
//!
//! Needs `docker-registry`, `htpasswd` (apache2-utils) and `openssl`; a
//! missing tool fails the test with the package to install.

use krm_fn_testbed::common;
use krm_fn_testbed::registry_support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krm_fn_runner::adapters::oci::{CaError, InspectorConfig, OciImageInspector};
use krm_fn_runner::domain::registry::Platform;
use krm_fn_runner::ports::{ImageInspectError, ImageInspector};
use registry_support::{Setup, TestRegistry, make_ca};

/// An inspector for `reg`: short names resolve under `<addr>/fns`, plain
/// HTTP unless the registry serves TLS, no Docker config of the machine.
fn config_for(reg: &TestRegistry) -> InspectorConfig {
    let mut c = InspectorConfig::new(&format!("{}/fns", reg.addr));
    c.docker_config_path = Some(reg.dir().join("no-docker-config.json"));
    if reg.ca_dir.is_none() {
        c.plain_http_registries = vec![reg.addr.clone()];
    }
    c
}

fn inspector(c: InspectorConfig) -> OciImageInspector {
    OciImageInspector::new(c).expect("inspector")
}

/// Private registries on, with the secret at `secret`.
fn with_secret(mut c: InspectorConfig, secret: PathBuf) -> InspectorConfig {
    c.registry_auth_secret_path = Some(secret);
    c
}

// ---------------------------------------------------------------- anonymous

#[tokio::test]
async fn metadata_and_digest_of_single_platform_images() {
    let reg = TestRegistry::start(Setup::anonymous());
    let (both, _) = reg
        .push_image(
            "fns/set-labels:v1",
            "amd64",
            Some(&["/usr/local/bin/function"]),
            Some(&["--serve", "x"]),
            "a",
        )
        .await;
    let (cmd_only, _) = reg
        .push_image("fns/cmd-only:v1", "amd64", None, Some(&["/bin/fn"]), "b")
        .await;
    let insp = inspector(config_for(&reg));

    // A short name gets the default prefix.
    let m = insp.inspect("set-labels:v1").await.unwrap();
    assert_eq!(m.image, format!("{}/fns/set-labels:v1", reg.addr));
    assert_eq!(m.registry, reg.addr);
    assert_eq!(m.digest, both);
    assert_eq!(m.platform_digest, both);
    assert!(m.digest.starts_with("sha256:") && m.digest.len() == 71);
    assert_eq!(
        m.entrypoint,
        ["/usr/local/bin/function", "--serve", "x"],
        "Entrypoint followed by Cmd"
    );
    assert_eq!(
        m.pinned_reference(),
        format!("{}/fns/set-labels@{both}", reg.addr)
    );

    let m = insp
        .inspect(&format!("{}/fns/cmd-only:v1", reg.addr))
        .await
        .unwrap();
    assert_eq!(
        (m.digest.as_str(), m.entrypoint.as_slice()),
        (cmd_only.as_str(), &["/bin/fn".to_string()][..])
    );

    // A digest reference needs no tag lookup.
    let pinned = format!("{}/fns/cmd-only@{cmd_only}", reg.addr);
    let m = insp.inspect(&pinned).await.unwrap();
    assert_eq!(m.digest, cmd_only);
    let tag_requests = reg.runner_requests("/manifests/v1 ");
    assert_eq!(tag_requests.len(), 2, "one HEAD per tag: {tag_requests:#?}");
    assert!(tag_requests.iter().all(|l| l.contains("\"HEAD ")));
}

#[tokio::test]
async fn multi_arch_indexes_resolve_to_the_configured_platform() {
    let reg = TestRegistry::start(Setup::anonymous());
    let (amd, amd_size) = reg
        .push_image(
            "fns/multi:amd64",
            "amd64",
            Some(&["/amd64-fn"]),
            None,
            "amd",
        )
        .await;
    let (arm, arm_size) = reg
        .push_image(
            "fns/multi:arm64",
            "arm64",
            Some(&["/arm64-fn"]),
            None,
            "arm",
        )
        .await;
    let index = reg
        .push_index(
            "fns/multi:v1",
            &[("arm64", &arm, arm_size), ("amd64", &amd, amd_size)],
        )
        .await;

    let m = inspector(config_for(&reg))
        .inspect("multi:v1")
        .await
        .unwrap();
    assert_eq!(m.digest, index, "pods pin the index digest");
    assert_eq!(m.platform_digest, amd);
    assert_eq!(m.entrypoint, ["/amd64-fn"]);

    let mut c = config_for(&reg);
    c.platform = Platform::parse("linux/arm64").unwrap();
    let m = inspector(c).inspect("multi:v1").await.unwrap();
    assert_eq!(
        (m.digest.as_str(), m.platform_digest.as_str()),
        (index.as_str(), arm.as_str())
    );
    assert_eq!(m.entrypoint, ["/arm64-fn"]);

    let mut c = config_for(&reg);
    c.platform = Platform::parse("linux/s390x").unwrap();
    let e = inspector(c).inspect("multi:v1").await.unwrap_err();
    let ImageInspectError::NoMatchingPlatform { available, .. } = &e else {
        panic!("expected NoMatchingPlatform, got {e}");
    };
    assert_eq!(available, "linux/arm64, linux/amd64");
    assert!(e.to_string().contains("linux/s390x"), "{e}");
}

#[tokio::test]
async fn cache_hits_make_no_request() {
    let reg = TestRegistry::start(Setup::anonymous());
    reg.push_image("fns/cached:v1", "amd64", Some(&["/fn"]), None, "c")
        .await;
    let insp = inspector(config_for(&reg));
    let first = insp.inspect("cached:v1").await.unwrap();
    let before = reg.runner_requests("").len();
    assert!(before >= 3, "HEAD tag, GET manifest, GET config: {before}");
    for _ in 0..5 {
        assert_eq!(insp.inspect("cached:v1").await.unwrap(), first);
    }
    let after = reg.runner_requests("");
    assert_eq!(
        after.len(),
        before,
        "cache hits reached the registry: {after:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_fetch_once() {
    let reg = TestRegistry::start(Setup::anonymous());
    let (digest, _) = reg
        .push_image("fns/popular:v1", "amd64", Some(&["/fn"]), None, "p")
        .await;
    let insp = Arc::new(inspector(config_for(&reg)));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let insp = insp.clone();
            tokio::spawn(async move { insp.inspect("popular:v1").await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap().digest, digest);
    }
    let tag = reg.runner_requests("/v2/fns/popular/manifests/v1 ");
    let by_digest = reg.runner_requests(&format!("/v2/fns/popular/manifests/{digest}"));
    let blobs = reg.runner_requests("/v2/fns/popular/blobs/");
    assert_eq!(tag.len(), 1, "{tag:#?}");
    assert_eq!(by_digest.len(), 1, "{by_digest:#?}");
    assert_eq!(blobs.len(), 1, "{blobs:#?}");
}

#[tokio::test]
async fn a_retagged_image_is_noticed_after_the_tag_ttl() {
    let reg = TestRegistry::start(Setup::anonymous());
    let (old, _) = reg
        .push_image("fns/moving:v1", "amd64", Some(&["/old"]), None, "1")
        .await;
    let mut c = config_for(&reg);
    c.cache.tag_ttl = Duration::from_millis(1500);
    let insp = inspector(c);
    let m = insp.inspect("moving:v1").await.unwrap();
    assert_eq!(
        (m.digest.as_str(), m.entrypoint.as_slice()),
        (old.as_str(), &["/old".to_string()][..])
    );
    let fetched_at = Instant::now();

    let (new, _) = reg
        .push_image("fns/moving:v1", "amd64", Some(&["/new"]), None, "2")
        .await;
    assert_ne!(old, new);
    // Within the TTL the cached digest stands.
    if fetched_at.elapsed() < Duration::from_millis(1200) {
        assert_eq!(insp.inspect("moving:v1").await.unwrap().digest, old);
    }
    tokio::time::sleep(Duration::from_millis(1600).saturating_sub(fetched_at.elapsed())).await;
    let m = insp.inspect("moving:v1").await.unwrap();
    assert_eq!(
        (m.digest.as_str(), m.entrypoint.as_slice()),
        (new.as_str(), &["/new".to_string()][..])
    );
}

#[tokio::test]
async fn a_missing_image_is_a_fast_not_found() {
    let reg = TestRegistry::start(Setup::anonymous());
    reg.push_image("fns/present:v1", "amd64", Some(&["/fn"]), None, "x")
        .await;
    let insp = inspector(config_for(&reg));
    for image in ["present:v2", "absent:v1"] {
        let started = Instant::now();
        let e = insp.inspect(image).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(e, ImageInspectError::NotFound { .. }), "{e}");
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(
            text.contains(&format!("{}/fns/{image}", reg.addr)),
            "{text}"
        );
        assert!(text.contains(&format!("registry {}", reg.addr)), "{text}");
    }
    let e = insp.inspect("Bad/Name").await.unwrap_err();
    assert!(
        matches!(e, ImageInspectError::InvalidReference { .. }),
        "{e}"
    );
}

#[tokio::test]
async fn timeouts_and_refused_connections_are_transient() {
    // A listener that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let _keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap().to_string();
    drop(closed);

    let mut c = InspectorConfig::new("unused");
    c.docker_config_path = None;
    c.plain_http_registries = vec![silent_addr.clone(), closed_addr.clone()];
    c.cache.fetch_timeout = Duration::from_millis(500);
    let insp = inspector(c);

    let started = Instant::now();
    let e = insp
        .inspect(&format!("{silent_addr}/fns/x:v1"))
        .await
        .unwrap_err();
    assert!(matches!(e, ImageInspectError::Timeout { .. }), "{e}");
    assert!(e.is_transient());
    assert!(started.elapsed() < Duration::from_secs(3));

    let e = insp
        .inspect(&format!("{closed_addr}/fns/x:v1"))
        .await
        .unwrap_err();
    assert!(matches!(e, ImageInspectError::Transient { .. }), "{e}");
}

// ------------------------------------------------------------- basic auth

#[tokio::test]
async fn basic_auth_with_the_private_registry_secret() {
    let reg = TestRegistry::start(Setup::basic("fnuser", "s3cret"));
    let (digest, _) = reg
        .push_image("fns/private:v1", "amd64", Some(&["/fn"]), None, "p")
        .await;
    // Docker's own key spelling for a registry: scheme and path.
    let secret = reg.docker_config(
        "secret.json",
        &format!("https://{}/v1/", reg.addr),
        "fnuser",
        "s3cret",
    );
    let m = inspector(with_secret(config_for(&reg), secret))
        .inspect("private:v1")
        .await
        .unwrap();
    assert_eq!(m.digest, digest);
    assert_eq!(m.entrypoint, ["/fn"]);
}

#[tokio::test]
async fn basic_auth_with_the_default_docker_config() {
    let reg = TestRegistry::start(Setup::basic("fnuser", "s3cret"));
    let (digest, _) = reg
        .push_image("fns/private:v1", "amd64", Some(&["/fn"]), None, "p")
        .await;
    let mut c = config_for(&reg);
    c.docker_config_path = Some(reg.docker_config("config.json", &reg.addr, "fnuser", "s3cret"));
    // Private registries on, but the secret has no entry for this host:
    // the default chain is used (Porch would go anonymous).
    let secret = reg.docker_config("secret.json", "ghcr.io", "other", "x");
    let m = inspector(with_secret(c, secret))
        .inspect("private:v1")
        .await
        .unwrap();
    assert_eq!(m.digest, digest);
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_a_clear_unauthorized_error() {
    let reg = TestRegistry::start(Setup::basic("fnuser", "s3cret"));
    reg.push_image("fns/private:v1", "amd64", Some(&["/fn"]), None, "p")
        .await;
    let secret = reg.docker_config("secret.json", &reg.addr, "fnuser", "wrong");
    let insp = inspector(with_secret(config_for(&reg), secret.clone()));
    let started = Instant::now();
    let e = insp.inspect("private:v1").await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    let ImageInspectError::Unauthorized { credential, .. } = &e else {
        panic!("expected Unauthorized, got {e}");
    };
    assert!(
        credential.contains("basic auth as \"fnuser\""),
        "{credential}"
    );
    assert!(
        credential.contains("--registry-auth-secret-path"),
        "{credential}"
    );
    let text = e.to_string();
    assert!(!text.contains("wrong"), "the password leaked: {text}");
    assert!(
        text.contains(&format!("{}/fns/private:v1", reg.addr)),
        "{text}"
    );
    assert!(!e.is_transient());

    // The secret is rotated: the next fetch uses the new password (a new
    // client, since oci-client keeps the first credential per client).
    reg.docker_config("secret.json", &reg.addr, "fnuser", "s3cret");
    insp.inspect("private:v1").await.unwrap();

    // No credentials at all.
    let e = inspector(config_for(&reg))
        .inspect("private:v1")
        .await
        .unwrap_err();
    assert!(matches!(e, ImageInspectError::Unauthorized { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("anonymous"), "{text}");
    assert!(text.contains("--registry-auth-secret-path"), "{text}");
}

// --------------------------------------------------------------------- TLS

#[tokio::test]
async fn tls_without_the_ca_names_the_options_to_set() {
    let reg = TestRegistry::start(Setup::tls());
    reg.push_image("fns/secure:v1", "amd64", Some(&["/fn"]), None, "t")
        .await;
    let e = inspector(config_for(&reg))
        .inspect("secure:v1")
        .await
        .unwrap_err();
    let ImageInspectError::Tls { tried, .. } = &e else {
        panic!("expected Tls, got {e}");
    };
    assert!(tried.starts_with("system roots only"), "{tried}");
    let text = e.to_string();
    assert!(text.contains("--enable-private-registries-tls"), "{text}");
    assert!(text.contains("--tls-secret-path"), "{text}");
    assert!(text.contains(&reg.addr), "{text}");
}

#[tokio::test]
async fn tls_with_the_ca_succeeds() {
    let reg = TestRegistry::start(Setup::tls());
    let (digest, _) = reg
        .push_image("fns/secure:v1", "amd64", Some(&["/fn"]), None, "t")
        .await;
    let ca_dir = reg.ca_dir.clone().unwrap();
    // Porch's flags: the CA is used with private registries on; the
    // mounted secret has no entry for this (anonymous) registry.
    let secret = reg.dir().join("empty-secret.json");
    std::fs::write(&secret, r#"{"auths": {}}"#).unwrap();
    let c = config_for(&reg).with_registry_flags(true, secret, true, ca_dir.clone());
    let m = inspector(c).inspect("secure:v1").await.unwrap();
    assert_eq!(m.digest, digest);

    // The same CA as ca.pem.
    let pem_dir = reg.dir().join("pem-only");
    std::fs::create_dir_all(&pem_dir).unwrap();
    std::fs::copy(ca_dir.join("ca.crt"), pem_dir.join("ca.pem")).unwrap();
    let mut c = config_for(&reg);
    c.tls_secret_path = Some(pem_dir);
    assert_eq!(
        inspector(c).inspect("secure:v1").await.unwrap().digest,
        digest
    );
}

#[tokio::test]
async fn tls_with_the_wrong_ca_says_what_was_tried() {
    let reg = TestRegistry::start(Setup::tls());
    reg.push_image("fns/secure:v1", "amd64", Some(&["/fn"]), None, "t")
        .await;
    let other = reg.dir().join("other-ca");
    make_ca(&other, "some other CA");
    std::fs::remove_file(other.join("ca.key")).unwrap();
    let mut c = config_for(&reg);
    c.tls_secret_path = Some(other.clone());
    let e = inspector(c).inspect("secure:v1").await.unwrap_err();
    let ImageInspectError::Tls { tried, hint, .. } = &e else {
        panic!("expected Tls, got {e}");
    };
    assert!(
        tried.contains(&format!(
            "system roots + CA from {}",
            other.join("ca.crt").display()
        )),
        "{tried}"
    );
    assert!(tried.contains("; system roots only: "), "{tried}");
    assert!(hint.contains("ca.crt"), "{hint}");

    // A missing CA directory fails at construction, naming the flag.
    let mut c = config_for(&reg);
    c.tls_secret_path = Some(reg.dir().join("nowhere"));
    let e = OciImageInspector::new(c).unwrap_err();
    assert!(matches!(e, CaError::Dir { .. }), "{e}");
    assert!(e.to_string().contains("--tls-secret-path"), "{e}");
}

// ---------------------------------------------------------- TLS and basic auth

#[tokio::test]
async fn tls_and_basic_auth() {
    let reg = TestRegistry::start(Setup::tls_basic("fnuser", "s3cret"));
    let (digest, _) = reg
        .push_image("fns/both:v1", "amd64", Some(&["/fn"]), Some(&["--x"]), "b")
        .await;
    let ca_dir = reg.ca_dir.clone().unwrap();
    let good = reg.docker_config("good.json", &reg.addr, "fnuser", "s3cret");
    let bad = reg.docker_config("bad.json", &reg.addr, "fnuser", "nope");

    let c = config_for(&reg).with_registry_flags(true, good, true, ca_dir.clone());
    let m = inspector(c).inspect("both:v1").await.unwrap();
    assert_eq!(m.digest, digest);
    assert_eq!(m.entrypoint, ["/fn", "--x"]);

    // A wrong password is an auth error, and it is not retried on the
    // default transport (only TLS failures are).
    let before = reg.runner_requests("/v2/fns/both/manifests/v1 ").len();
    let c = config_for(&reg).with_registry_flags(true, bad, true, ca_dir.clone());
    let e = inspector(c).inspect("both:v1").await.unwrap_err();
    assert!(matches!(e, ImageInspectError::Unauthorized { .. }), "{e}");
    let attempts = reg.runner_requests("/v2/fns/both/manifests/v1 ").len() - before;
    assert!(
        attempts <= 2,
        "one attempt is HEAD then GET, got {attempts}"
    );

    // Right password, CA not configured: a TLS error, not an auth error.
    let good = reg.dir().join("good.json");
    let c = config_for(&reg).with_registry_flags(true, good, false, ca_dir);
    let e = inspector(c).inspect("both:v1").await.unwrap_err();
    assert!(matches!(e, ImageInspectError::Tls { .. }), "{e}");
    assert!(
        e.to_string().contains("--enable-private-registries-tls"),
        "{e}"
    );
}

/// kpt's `tag` semver constraints (`krm-functions.md` §3.10): the tag list
/// comes from the registry (all pages, with credentials), and
/// `krm-fn-runner render` runs the highest matching tag.
#[tokio::test]
async fn tag_constraints_resolve_against_the_registry_tag_list() {
    use krm_fn_runner::ports::TagLister;
    let reg = TestRegistry::start(Setup::basic("fnuser", "s3cret"));
    for tag in ["v0.3.9", "v0.4.1", "v0.4.5", "v0.5.0", "sha256-abc.sig"] {
        reg.push_image(
            &format!("fns/set-namespace:{tag}"),
            "amd64",
            Some(&["/fn"]),
            None,
            tag,
        )
        .await;
    }
    let config = reg.docker_config("auth.json", &reg.addr, "fnuser", "s3cret");
    let lister = inspector(with_secret(config_for(&reg), config.clone()));
    let repository = format!("{}/fns/set-namespace", reg.addr);
    let mut tags = lister.list_tags(&repository).await.unwrap();
    tags.sort();
    assert_eq!(
        tags,
        ["sha256-abc.sig", "v0.3.9", "v0.4.1", "v0.4.5", "v0.5.0"]
    );
    let anonymous = inspector(config_for(&reg));
    let err = anonymous.list_tags(&repository).await.unwrap_err();
    assert!(err.contains("credentials"), "{err}");

    // The render CLI: the Docker config (as kpt's container CLI would use)
    // authenticates the tag list; an exec config maps the resolved image
    // to the catalog binary, so only the right tag can run.
    let work = tempfile::tempdir().unwrap();
    let pkg = work.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("Kptfile"),
        format!(
            "apiVersion: kpt.dev/v1\nkind: Kptfile\nmetadata:\n  name: pkg\npipeline:\n  mutators:\n    - image: {repository}\n      tag: \"~0.4\"\n      configMap:\n        namespace: resolved\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm # the config\n",
    )
    .unwrap();
    std::fs::write(
        work.path().join("config.yaml"),
        format!("functions:\n- function: set-namespace\n  images:\n  - {repository}:v0.4.5\n"),
    )
    .unwrap();
    let docker = work.path().join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::copy(&config, docker.join("config.json")).unwrap();
    let functions = common::catalog_dir().join("bin");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .arg("render")
        .arg(&pkg)
        .arg(format!("--plain-http-registry={}", reg.addr))
        .arg(format!(
            "--exec-config={}",
            work.path().join("config.yaml").display()
        ))
        .arg(format!("--functions={}", functions.display()))
        .arg(format!(
            "--results-dir={}",
            work.path().join("results").display()
        ))
        .env("DOCKER_CONFIG", &docker)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{repository}:v0.4.5")), "{stderr}");
    let cm = std::fs::read_to_string(pkg.join("cm.yaml")).unwrap();
    assert!(
        cm.contains("namespace: resolved") && cm.contains("# the config"),
        "{cm}"
    );

    // No tag satisfies the constraint: kpt's message, nothing written.
    let kptfile = std::fs::read_to_string(pkg.join("Kptfile")).unwrap();
    std::fs::write(pkg.join("Kptfile"), kptfile.replace("~0.4", "~0.9")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_krm-fn-runner"))
        .arg("render")
        .arg(&pkg)
        .arg(format!("--plain-http-registry={}", reg.addr))
        .env("DOCKER_CONFIG", &docker)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no tag could be found matching the version constraint \"~0.9\""),
        "{stderr}"
    );
}
