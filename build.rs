//! Compiles `proto/evaluator.proto` with protox (pure Rust, no `protoc` needed)
//! and generates the tonic client and server (only with the `full` feature:
//! the render-only build has no gRPC).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/evaluator.proto");
    #[cfg(feature = "full")]
    {
        let fds = protox::compile(["evaluator.proto"], ["proto"])?;
        tonic_prost_build::configure()
            .bytes(".evaluator")
            .compile_fds(fds)?;
    }
    Ok(())
}
