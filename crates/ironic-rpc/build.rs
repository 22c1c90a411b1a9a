//! Generates the protobuf types of `proto/ironic/rpc/v1` with a vendored `protoc`, so no
//! system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = root.join("ironic/rpc/v1/conductor.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    prost_build::Config::new()
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .compile_protos(&[file], &[root])?;
    Ok(())
}
