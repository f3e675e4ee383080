//! Renders a kpt package directory in place with krm-fn-runner as a library,
//! like `kpt fn render --allow-exec`: builtin functions run in process,
//! `exec:` functions as child processes.
//!
//! ```text
//! cp -r examples/packages/hello /tmp/hello
//! cargo run --example render_package -- /tmp/hello
//! ```

use krm_fn_runner::{RenderOptions, RuntimeChain, render_dir};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: render_package PACKAGE_DIR")?;
    let options = RenderOptions::builder().allow_exec(true).build();
    let rendered = render_dir(dir, &RuntimeChain::local(), options).await?;
    rendered.write_in_place()?;
    rendered.into_result()?;
    Ok(())
}
