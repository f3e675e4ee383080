"""A FunctionEvaluator client written with Python's grpcio and its own copy of
the request message as porch-server sends it today: `string Tag = 3` beside
`image` (Porch's evaluator.proto after the Tag change). The .proto below is
written here, not generated from this project's proto/, so the test shows that
a client that knows only Porch's wire format selects versions as Porch's
runner does.

Usage: tag_client.py --address ADDR [--timeout SECONDS] --input FILE --cases FILE
ADDR is host:port or unix:/path. FILE (cases) is a JSON list of objects
{"image": ..., "tag": ...}; "tag" may be absent (not sent). Prints one JSON
list: per case {"code": "OK"|<status name>, "details": ..., "log": <stderr of
the function>, "output": <the ResourceList returned>}. Each request has a
deadline of SECONDS (default 60).
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

PORCH_PROTO = """
syntax = "proto3";
package evaluator;
service FunctionEvaluator {
  rpc EvaluateFunction (EvaluateFunctionRequest) returns (EvaluateFunctionResponse) {}
}
message EvaluateFunctionRequest {
  bytes resource_list = 1;
  string image = 2;
  string Tag = 3;
}
message EvaluateFunctionResponse {
  bytes resource_list = 1;
  bytes log = 2;
}
"""


def load_stubs(out_dir):
    with open(os.path.join(out_dir, "porch_evaluator.proto"), "w") as f:
        f.write(PORCH_PROTO)
    code = protoc.main(
        [
            "protoc",
            f"-I{out_dir}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            "porch_evaluator.proto",
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with {code}")
    sys.path.insert(0, out_dir)
    return (
        importlib.import_module("porch_evaluator_pb2"),
        importlib.import_module("porch_evaluator_pb2_grpc"),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--input", required=True)
    ap.add_argument("--cases", required=True)
    args = ap.parse_args()
    with open(args.input, "rb") as f:
        resource_list = f.read()
    with open(args.cases) as f:
        cases = json.load(f)

    with tempfile.TemporaryDirectory() as out:
        pb2, pb2_grpc = load_stubs(out)
        options = [("grpc.default_authority", "localhost")]
        with grpc.insecure_channel(args.address, options=options) as channel:
            stub = pb2_grpc.FunctionEvaluatorStub(channel)
            seen = []
            for case in cases:
                request = pb2.EvaluateFunctionRequest(
                    resource_list=resource_list, image=case["image"]
                )
                if "tag" in case:
                    request.Tag = case["tag"]
                try:
                    response = stub.EvaluateFunction(request, timeout=args.timeout)
                    seen.append(
                        {
                            "code": "OK",
                            "details": "",
                            "log": response.log.decode("utf-8", "replace"),
                            "output": response.resource_list.decode(
                                "utf-8", "replace"
                            ),
                        }
                    )
                except grpc.RpcError as e:
                    seen.append(
                        {
                            "code": e.code().name,
                            "details": e.details(),
                            "log": "",
                            "output": "",
                        }
                    )
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
