//! Where registry credentials come from: the mounted pull-secret file
//! (`--registry-auth-secret-path`, with `--enable-private-registries`) and
//! the default Docker chain (`$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`, with credential helpers run through
//! `docker_credential`).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use docker_credential::{CredentialRetrievalError, DockerCredential};

use crate::domain::image::DOCKER_HUB_HOST;
use crate::domain::registry::{
    CredentialLookup, DOCKER_HUB_CONFIG_KEY, DockerConfig, RegistryCredential,
};

/// A credential with a description of where it came from (for errors and
/// logs; never contains the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub credential: RegistryCredential,
    pub description: String,
}

/// Why credentials could not be read: the source and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredentialError {
    pub source_name: String,
    pub detail: String,
}

/// The credential sources of one inspector.
#[derive(Debug, Clone)]
pub(crate) struct CredentialSources {
    /// `--registry-auth-secret-path`, when private registries are enabled.
    pub secret_path: Option<PathBuf>,
    /// The default chain's `config.json`, if any location is known.
    pub docker_config: Option<PathBuf>,
}

/// `$DOCKER_CONFIG/config.json`, else `$HOME/.docker/config.json`.
pub(crate) fn default_docker_config_path() -> Option<PathBuf> {
    std::env::var_os("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")))
        .map(|d| d.join("config.json"))
}

impl CredentialSources {
    /// The credential for registry `host`: the pull-secret file's entry for
    /// it when private registries are enabled and the file has one, else
    /// the default Docker chain, else anonymous.
    ///
    /// Unlike Porch (spec §10 item 20) a host missing from the secret falls
    /// back to the default chain instead of being pulled anonymously, so the
    /// public catalog keeps working whatever the secret holds. A secret file
    /// that cannot be read or parsed is an error (as in Porch).
    pub async fn resolve(&self, host: &str) -> Result<Resolved, CredentialError> {
        if let Some(path) = &self.secret_path {
            let source_name = format!("--registry-auth-secret-path {}", path.display());
            let bytes = tokio::fs::read(path).await.map_err(|e| CredentialError {
                source_name: source_name.clone(),
                detail: format!("{e}; check that the pull secret is mounted there"),
            })?;
            let config = DockerConfig::parse(&bytes).map_err(|e| CredentialError {
                source_name: source_name.clone(),
                detail: e.to_string(),
            })?;
            match config.lookup(host, false) {
                Ok(CredentialLookup::Found { key, credential }) => {
                    return Ok(Resolved {
                        description: format!(
                            "{} from {source_name} (key {key:?})",
                            credential.describe()
                        ),
                        credential,
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(CredentialError {
                        source_name,
                        detail: e.to_string(),
                    });
                }
            }
        }
        self.default_chain(host).await
    }

    async fn default_chain(&self, host: &str) -> Result<Resolved, CredentialError> {
        let anonymous = |why: String| Resolved {
            credential: RegistryCredential::Anonymous,
            description: format!("anonymous access ({why})"),
        };
        let Some(path) = &self.docker_config else {
            return Ok(anonymous(
                "no Docker config location: neither DOCKER_CONFIG nor HOME is set".into(),
            ));
        };
        let source_name = format!("Docker config {}", path.display());
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(anonymous(format!("no Docker config at {}", path.display())));
            }
            Err(e) => {
                return Err(CredentialError {
                    source_name,
                    detail: e.to_string(),
                });
            }
        };
        let config = DockerConfig::parse(&bytes).map_err(|e| CredentialError {
            source_name: source_name.clone(),
            detail: e.to_string(),
        })?;
        match config.lookup(host, true) {
            Ok(CredentialLookup::Found { key, credential }) => Ok(Resolved {
                description: format!("{} from {source_name} (key {key:?})", credential.describe()),
                credential,
            }),
            Ok(CredentialLookup::NotConfigured) => {
                Ok(anonymous(format!("{source_name} has no entry for {host}")))
            }
            Ok(CredentialLookup::Helper(helper)) => run_helper(host, &helper).await,
            Err(e) => Err(CredentialError {
                source_name,
                detail: e.to_string(),
            }),
        }
    }
}

/// Asks `docker-credential-<helper>` for `host`'s credential (Docker Hub is
/// asked under its historical key, as the Docker CLI does). "Not found"
/// answers mean anonymous access.
async fn run_helper(host: &str, helper: &str) -> Result<Resolved, CredentialError> {
    let server = if host == DOCKER_HUB_HOST {
        DOCKER_HUB_CONFIG_KEY.to_string()
    } else {
        host.to_string()
    };
    let config = serde_json::json!({ "credsStore": helper }).to_string();
    let server_for_task = server.clone();
    // The helper is a child process and the crate is blocking.
    let result = tokio::task::spawn_blocking(move || {
        docker_credential::get_credential_from_reader(Cursor::new(config), &server_for_task)
    })
    .await;
    let source_name = format!("credential helper docker-credential-{helper}");
    let err = |detail: String| CredentialError {
        source_name: source_name.clone(),
        detail,
    };
    match result {
        Ok(Ok(DockerCredential::UsernamePassword(username, password))) => {
            let credential = RegistryCredential::Basic { username, password };
            Ok(Resolved {
                description: format!("{} from {source_name}", credential.describe()),
                credential,
            })
        }
        Ok(Ok(DockerCredential::IdentityToken(_))) => Err(err(
            "the helper returned an identity token, which is not supported; store a username and password instead".into(),
        )),
        Ok(Err(CredentialRetrievalError::HelperFailure { stdout, stderr, .. }))
            if format!("{stdout}{stderr}").contains("credentials not found") =>
        {
            Ok(Resolved {
                credential: RegistryCredential::Anonymous,
                description: format!("anonymous access ({source_name} has nothing for {server})"),
            })
        }
        Ok(Err(e)) => Err(err(e.to_string())),
        Err(e) => Err(err(format!("the helper task failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn secret_entries_win_and_missing_hosts_fall_back_to_the_default_chain() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.json");
        std::fs::write(
            &secret,
            r#"{"auths": {"https://private.example/v1/": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        let docker = dir.path().join("config.json");
        std::fs::write(
            &docker,
            r#"{"auths": {"ghcr.io": {"username": "g", "password": "gp"}}}"#,
        )
        .unwrap();
        let sources = CredentialSources {
            secret_path: Some(secret.clone()),
            docker_config: Some(docker.clone()),
        };
        let r = sources.resolve("private.example").await.unwrap();
        assert_eq!(
            r.credential,
            RegistryCredential::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        assert!(
            r.description.contains("--registry-auth-secret-path"),
            "{}",
            r.description
        );
        let r = sources.resolve("ghcr.io").await.unwrap();
        assert!(r.description.contains("Docker config"), "{}", r.description);
        let r = sources.resolve("quay.io").await.unwrap();
        assert_eq!(r.credential, RegistryCredential::Anonymous);

        std::fs::write(&secret, "garbage").unwrap();
        let e = sources.resolve("ghcr.io").await.unwrap_err();
        assert!(e.source_name.contains("--registry-auth-secret-path"));
        std::fs::remove_file(&secret).unwrap();
        let e = sources.resolve("ghcr.io").await.unwrap_err();
        assert!(e.detail.contains("mounted"), "{}", e.detail);

        let no_config = CredentialSources {
            secret_path: None,
            docker_config: Some(dir.path().join("missing.json")),
        };
        let r = no_config.resolve("ghcr.io").await.unwrap();
        assert_eq!(r.credential, RegistryCredential::Anonymous);
        assert!(r.description.contains("no Docker config"));
    }

    #[tokio::test]
    async fn a_missing_helper_is_a_credential_error() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("config.json");
        std::fs::write(
            &docker,
            r#"{"credHelpers": {"r.example": "krm-fn-runner-no-such-helper"}}"#,
        )
        .unwrap();
        let sources = CredentialSources {
            secret_path: None,
            docker_config: Some(docker),
        };
        let e = sources.resolve("r.example").await.unwrap_err();
        assert!(
            e.source_name
                .contains("docker-credential-krm-fn-runner-no-such-helper"),
            "{e:?}"
        );
    }
}
