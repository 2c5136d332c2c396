//! The code generated from `proto/idmint/v1/idmint.proto`: the messages, the
//! server (`id_service_server`) and a client (`id_service_client`), which
//! followers forward monotonic requests with, and the binary's `bench` and the
//! tests use. Public as `grpc::proto`.
#![allow(missing_docs)]

tonic::include_proto!("idmint.v1");

/// The encoded `FileDescriptorSet` of `idmint.proto`, which server
/// reflection serves.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("idmint_descriptor");
