//! Compiles `proto/evaluator.proto` with protox (pure Rust, no `protoc` needed)
//! and generates the tonic client and server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/evaluator.proto");
    let fds = protox::compile(["evaluator.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".evaluator")
        .compile_fds(fds)?;
    Ok(())
}
