//! Generates the gRPC server and client (`grpc::proto`) from this crate's
//! `proto/idmint/v1/idmint.proto` (the repository's `proto/` is a link to it,
//! so the published crate carries the file its build needs), and its encoded
//! file descriptor set, which server reflection serves
//! (`grpc::proto::FILE_DESCRIPTOR_SET`).
//!
//! The `.proto` file is parsed by `protox`, a protobuf compiler written in
//! Rust, not by `protoc`: building idmint needs no system tool. protox makes
//! the same `FileDescriptorSet` that `protoc --include_imports
//! --include_source_info` would (source info included, so the generated code
//! keeps the proto file's comments as docs), and tonic-prost-build generates
//! the Rust code from that set without running anything.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "proto";
    let proto = "proto/idmint/v1/idmint.proto";
    println!("cargo:rerun-if-changed={proto}");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new([root])?;
    compiler
        .include_imports(true)
        .include_source_info(true)
        .open_file(proto)?;
    // What `tonic::include_file_descriptor_set!("idmint_descriptor")` embeds.
    std::fs::write(
        out_dir.join("idmint_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
