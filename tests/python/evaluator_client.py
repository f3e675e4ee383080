"""A FunctionEvaluator client written with Python's grpcio, to prove that a
client not written in Rust can call krm-fn-runner unchanged.

It generates stubs from proto/evaluator.proto with grpc_tools.protoc, then:
checks health (SERVING), evaluates one function, and asks for an unknown image
(NOT_FOUND). Prints one JSON object with what it saw.

Usage: evaluator_client.py --proto PROTO_DIR --address ADDR [--image IMAGE] --input FILE
                           [--failing-image IMAGE] [--probe IMAGE]...
ADDR is host:port or unix:/path. With --failing-image, also evaluates that
image and reports the status code and the length of its message. Each --probe
image is evaluated too and reported under "probes" as {code, details}.
Without --image the first evaluation is skipped ("output" and "log" are empty).
"""

import argparse
import importlib
import json
import sys
import tempfile

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_tools import protoc


def load_stubs(proto_dir, out_dir):
    code = protoc.main(
        [
            "protoc",
            f"-I{proto_dir}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            "evaluator.proto",
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with {code}")
    sys.path.insert(0, out_dir)
    return importlib.import_module("evaluator_pb2"), importlib.import_module("evaluator_pb2_grpc")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proto", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--image")
    ap.add_argument("--input", required=True)
    ap.add_argument("--failing-image")
    ap.add_argument("--probe", action="append", default=[])
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as out:
        pb2, pb2_grpc = load_stubs(args.proto, out)
        options = [
            ("grpc.max_receive_message_length", 6291456),
            ("grpc.max_send_message_length", 6291456),
            # grpc-core sends the socket path as :authority on unix sockets,
            # which HTTP/2 servers may refuse; name a plain host instead.
            ("grpc.default_authority", "localhost"),
        ]
        with grpc.insecure_channel(args.address, options=options) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
            stub = pb2_grpc.FunctionEvaluatorStub(channel)
            with open(args.input, "rb") as f:
                rl = f.read()
            resp = None
            if args.image:
                resp = stub.EvaluateFunction(
                    pb2.EvaluateFunctionRequest(resource_list=rl, image=args.image), timeout=30
                )
            probes = {}
            for image in args.probe:
                try:
                    stub.EvaluateFunction(
                        pb2.EvaluateFunctionRequest(resource_list=rl, image=image), timeout=30
                    )
                    probes[image] = {"code": "OK", "details": ""}
                except grpc.RpcError as e:
                    probes[image] = {"code": e.code().name, "details": e.details()}
            try:
                stub.EvaluateFunction(
                    pb2.EvaluateFunctionRequest(resource_list=rl, image="example.com/none:v0"),
                    timeout=30,
                )
                missing = {"code": "OK", "details": ""}
            except grpc.RpcError as e:
                missing = {"code": e.code().name, "details": e.details()}
            failing = None
            if args.failing_image:
                try:
                    stub.EvaluateFunction(
                        pb2.EvaluateFunctionRequest(resource_list=rl, image=args.failing_image),
                        timeout=30,
                    )
                    failing = {"code": "OK", "details": ""}
                except grpc.RpcError as e:
                    failing = {"code": e.code().name, "details": e.details()}
    print(
        json.dumps(
            {
                "health": health_pb2.HealthCheckResponse.ServingStatus.Name(status),
                "output": resp.resource_list.decode() if resp else "",
                "log": resp.log.decode() if resp else "",
                "probes": probes,
                "missing": missing,
                "failing": failing,
            }
        )
    )


if __name__ == "__main__":
    main()
