//! Generates the gRPC server and client (`grpc::proto`) from the repository's
//! `proto/idmint/v1/idmint.proto`. Needs `protoc` (`scripts/deps` installs it;
//! `PROTOC` names another one).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../../proto";
    let proto = "../../proto/idmint/v1/idmint.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&[proto], &[root])?;
    Ok(())
}
