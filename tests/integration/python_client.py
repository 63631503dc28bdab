#!/usr/bin/python3
"""Streams one reply from a pdserve front end using Python gRPC.

Usage: python_client.py PROTO_DIR TARGET MAX_TOKENS PROMPT

Needs Debian's python3-grpcio and python3-grpc-tools (system python3). The
stubs are generated from PROTO_DIR into a temporary folder at run time.
Prints: deltas=N, finish=REASON completion_tokens=N, health=STATUS, text=...
"""
import importlib
import os
import shutil
import sys
import tempfile

from grpc_tools import protoc
import grpc


def main():
    proto_dir, target, max_tokens, prompt = sys.argv[1:5]
    out = tempfile.mkdtemp(prefix="pdserve-py-")
    # health.proto is compiled from a copy under another folder name: a
    # generated "grpc" package would shadow the grpc library itself.
    src = os.path.join(out, "src")
    os.makedirs(os.path.join(src, "pdserve_health"))
    shutil.copy(os.path.join(proto_dir, "grpc/health/v1/health.proto"),
                os.path.join(src, "pdserve_health/health.proto"))
    for args in (["-I" + proto_dir, "pdserve/v1/common.proto",
                  "pdserve/v1/api.proto"],
                 ["-I" + src, "pdserve_health/health.proto"]):
        rc = protoc.main(["protoc", "--python_out=" + out,
                          "--grpc_python_out=" + out] + args)
        if rc != 0:
            sys.exit("protoc failed: %d" % rc)
    sys.path.insert(0, out)
    api = importlib.import_module("pdserve.v1.api_pb2")
    api_grpc = importlib.import_module("pdserve.v1.api_pb2_grpc")
    health = importlib.import_module("pdserve_health.health_pb2")
    health_grpc = importlib.import_module("pdserve_health.health_pb2_grpc")

    with grpc.insecure_channel(target) as channel:
        stub = api_grpc.InferenceStub(channel)
        req = api.GenerateRequest(prompt=prompt, max_tokens=int(max_tokens))
        text, deltas, final = "", 0, None
        for resp in stub.Generate(req, timeout=120):
            if resp.HasField("delta"):
                deltas += 1
                text += resp.delta.text
            elif resp.HasField("final"):
                final = resp.final
        hs = health_grpc.HealthStub(channel).Check(
            health.HealthCheckRequest(service=""), timeout=10)
    common = importlib.import_module("pdserve.v1.common_pb2")
    print("deltas=%d" % deltas)
    print("finish=%s completion_tokens=%d" % (
        common.FinishReason.Name(final.finish_reason),
        final.usage.completion_tokens))
    print("health=%s" % health.HealthCheckResponse.ServingStatus.Name(hs.status))
    print("text=" + text)


if __name__ == "__main__":
    main()
