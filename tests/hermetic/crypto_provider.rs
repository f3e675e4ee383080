//! One rustls crypto provider: aws-lc-rs. kube, tonic and oci-client (via
//! reqwest) must not pull in `ring` as well, or rustls cannot pick a
//! process-wide default provider and panics (rust-stack §9.1). This runs
//! `cargo tree -i ring -e normal` and expects it to find nothing.

use std::process::Command;

#[test]
fn ring_is_not_a_normal_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "-i", "ring", "-e", "normal"])
        .output()
        .expect("cargo tree runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.trim().is_empty(),
        "`ring` is compiled into the runner next to aws-lc-rs; find who pulls it in with \
         `cargo tree -i ring -e normal` and turn that crate's ring feature off:\n{stdout}"
    );
    assert!(
        out.status.success() || stderr.contains("did not match any packages"),
        "cargo tree failed: {stderr}"
    );
}
