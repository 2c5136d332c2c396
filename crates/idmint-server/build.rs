//! Generates the gRPC server and client (`grpc::proto`) from the repository's
//! `proto/idmint/v1/idmint.proto`, and its encoded file descriptor set, which
//! server reflection serves (`grpc::proto::FILE_DESCRIPTOR_SET`). Needs
//! `protoc` (`scripts/deps` installs it; `PROTOC` names another one).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let proto = "../../proto/idmint/v1/idmint.proto";
    println!("cargo:rerun-if-changed={proto}");
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .file_descriptor_set_path(out_dir.join("idmint_descriptor.bin"))
        .compile_protos(&[proto], &[root])?;
    Ok(())
}
