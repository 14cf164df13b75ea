"""Stand-in for Triton's C++ ../clients/simple_{http,grpc}_infer_client (not built here): as
they do, one inference of model "simple" (INPUT0 = 0..15, INPUT1 = 1s, INT32 [1, 16]; all
outputs), the sum and difference checked; exit status 1 on any error.
  python3 qa23_simple_client.py http|grpc [-u URL]"""

import argparse
import sys

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("protocol", choices=("http", "grpc"))
    parser.add_argument("-u", "--url", default=None)
    args = parser.parse_args()
    if args.protocol == "http":
        import tritonclient.http as client_module

        url = args.url or "localhost:8000"
    else:
        import tritonclient.grpc as client_module

        url = args.url or "localhost:8001"
    client = client_module.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [client_module.InferInput("INPUT0", [1, 16], "INT32"),
              client_module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    if not (np.array_equal(result.as_numpy("OUTPUT0"), a + b)
            and np.array_equal(result.as_numpy("OUTPUT1"), a - b)):
        print("error: incorrect sum or difference")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
