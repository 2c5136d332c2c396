"""A gRPC client that knows nothing of idmint but its address: it reads
idmint's gRPC surface with Python's grpcio, the way grpcurl, Kubernetes probes
and other generic clients do, and fails (non-zero exit, a line on stderr) on
anything unexpected.

1. grpc.health.v1: Check answers SERVING for "" and "idmint.v1.IdService",
   and NOT_FOUND for a service the server doesn't have.
2. Server reflection, v1alpha (grpcio-reflection's client) and v1 (the same
   messages under the v1 method name): the services listed include
   idmint.v1.IdService and grpc.health.v1.Health.
3. The file descriptors fetched by reflection make the request and response
   classes, with no generated stubs, and GetIds is called with them.

Prints one JSON line: the services listed and the IDs GetIds returned, for
the Rust test that runs this (tests/it/serve_grpc_python.rs) to check.

    python check_grpc.py 127.0.0.1:50051 order 5

Over TLS (tests/it/serve_tls.rs), the CA to trust and, for mutual TLS, the
client's certificate and key:

    python check_grpc.py 127.0.0.1:50051 order 5 --ca ca.pem \
        --cert client.pem --key client.key
"""

import argparse
import json
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

ID_SERVICE = "idmint.v1.IdService"
HEALTH_SERVICE = "grpc.health.v1.Health"
TIMEOUT = 10


def fail(message):
    print(f"check_grpc: {message}", file=sys.stderr)
    sys.exit(1)


def check_health(channel):
    health = health_pb2_grpc.HealthStub(channel)
    serving = health_pb2.HealthCheckResponse.SERVING
    for service in ("", ID_SERVICE):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
        if reply.status != serving:
            name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            fail(f"Health.Check({service!r}) is {name}, not SERVING")
    try:
        health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=TIMEOUT)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.NOT_FOUND:
            fail(f"Health.Check of an unknown service failed with {e.code()}, not NOT_FOUND")
    else:
        fail("Health.Check of an unknown service answered; it should be NOT_FOUND")


def list_services_v1(channel):
    """ListServices through grpc.reflection.v1, whose messages are v1alpha's
    under another package: the same bytes on the wire."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    replies = list(call(iter([request]), timeout=TIMEOUT))
    if len(replies) != 1 or not replies[0].HasField("list_services_response"):
        fail(f"reflection v1 ListServices answered {replies!r}")
    return sorted(s.name for s in replies[0].list_services_response.service)


def get_ids(channel, pool, key, count):
    """GetIds with classes made from the descriptors reflection served."""
    service = pool.FindServiceByName(ID_SERVICE)
    method = service.methods_by_name["GetIds"]
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(
        f"/{service.full_name}/{method.name}",
        request_serializer=request_class.SerializeToString,
        response_deserializer=response_class.FromString,
    )
    reply = call(request_class(key=key, count=count), timeout=TIMEOUT)
    if reply.key != key:
        fail(f"GetIds answered for key {reply.key!r}, not {key!r}")
    return list(reply.ids), reply.strategy


def open_channel(args):
    """A plain channel, or a TLS one trusting --ca (with --cert/--key, mTLS)."""
    if args.ca is None:
        return grpc.insecure_channel(args.address)

    def read(path):
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(args.ca),
        private_key=read(args.key_file),
        certificate_chain=read(args.cert),
    )
    return grpc.secure_channel(args.address, credentials)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("address", help="HOST:PORT")
    parser.add_argument("key_name", metavar="KEY")
    parser.add_argument("count", type=int)
    parser.add_argument("--ca", help="TLS: the CA certificate (PEM) to trust")
    parser.add_argument("--cert", help="mTLS: the client certificate (PEM)")
    parser.add_argument("--key", dest="key_file", help="mTLS: the client key (PEM)")
    args = parser.parse_args()
    key, count = args.key_name, args.count
    with open_channel(args) as channel:
        check_health(channel)

        database = ProtoReflectionDescriptorDatabase(channel)
        v1alpha = sorted(database.get_services())
        v1 = list_services_v1(channel)
        for listed, version in ((v1alpha, "v1alpha"), (v1, "v1")):
            for wanted in (ID_SERVICE, HEALTH_SERVICE):
                if wanted not in listed:
                    fail(f"reflection {version} lists {listed}, without {wanted}")

        pool = descriptor_pool.DescriptorPool(database)
        ids, strategy = get_ids(channel, pool, key, count)
    print(json.dumps({"v1alpha": v1alpha, "v1": v1, "strategy": strategy, "ids": ids}))


if __name__ == "__main__":
    main()
