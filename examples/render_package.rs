//! Renders a kpt package directory in place with krm-fn-runner as a library,
//! like `kpt fn render --allow-exec`: builtin functions run in process,
//! `exec:` functions as child processes.
//!
//! ```text
//! cp -r examples/packages/hello /tmp/hello
//! cargo run --example render_package -- /tmp/hello
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use krm_fn_runner::adapters::package::render_dir;
use krm_fn_runner::adapters::runtime::{BuiltinRuntime, ExecCommandRuntime, RuntimeChain};
use krm_fn_runner::domain::render::{NoEvents, RenderOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: render_package PACKAGE_DIR");
        return Ok(ExitCode::from(2));
    };
    // Builtins first; anything they do not serve falls through to exec.
    let runtime = RuntimeChain::new()
        .with("builtin", Arc::new(BuiltinRuntime::default()))
        .with("exec", Arc::new(ExecCommandRuntime::inheriting(6 << 20)));
    let options = RenderOptions {
        allow_exec: true,
        ..RenderOptions::default()
    };
    let rendered = render_dir(dir.as_ref(), &runtime, options, &NoEvents).await?;
    for step in &rendered.outcome.steps {
        let verdict = if step.failed() { "FAIL" } else { "PASS" };
        println!("[{verdict}] {}", step.target);
        for result in &step.results {
            println!("  {result}");
        }
    }
    let summary = rendered.write_in_place()?;
    println!(
        "written: {:?}, pruned: {:?}",
        summary.written, summary.pruned
    );
    let error = rendered.render_status().error;
    if error.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("{error}");
    Ok(ExitCode::from(1))
}
