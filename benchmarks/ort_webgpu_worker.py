"""A long-lived onnxruntime worker for benchmarks/bench_models.py: it runs in the peer's own
environment (onnxruntime with the WebGPU execution provider, e.g.
`(. /tmp/mesa25/env.sh; /tmp/ortweb/bin/python benchmarks/ort_webgpu_worker.py)`) and takes one
JSON request a line on stdin, answering one JSON line on stdout, so the driver can alternate
engines call by call. Feeds and outputs travel as .npz files (paths in the request); times are
measured here, around `InferenceSession.run` alone.

Requests: {"op": "load", "path": P, "provider": "WebGpuExecutionProvider"} -> {"ok", "load_s",
"providers"}; {"op": "run", "feeds": NPZ, "out": NPZ or null} -> {"ok", "run_s"}; {"op": "quit"}.
A failure answers {"ok": false, "error": "..."} and the worker stays up. numpy and onnxruntime
only: it must not import onyxia.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort


def main() -> None:
    # The protocol owns the real stdout; anything a library prints goes to stderr.
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sess, feeds, feeds_path = None, None, None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "quit":
                break
            if req["op"] == "load":
                start = time.perf_counter()
                options = ort.SessionOptions()  # no spinning pool threads between calls (bench_models)
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.add_session_config_entry("session.inter_op.allow_spinning", "0")
                sess = ort.InferenceSession(req["path"], options,
                                            providers=[req.get("provider", "WebGpuExecutionProvider")])
                reply = {"load_s": time.perf_counter() - start, "providers": sess.get_providers()}
            elif req["op"] == "run":
                if req["feeds"] != feeds_path:  # the same feeds for every timed call of a size
                    with np.load(req["feeds"]) as data:
                        feeds, feeds_path = {k: data[k] for k in data.files}, req["feeds"]
                start = time.perf_counter()
                outputs = sess.run(None, feeds)
                reply = {"run_s": time.perf_counter() - start}
                if req.get("out"):
                    np.savez(req["out"], *outputs)
            else:
                raise ValueError(f"unknown op {req['op']!r}")
            reply["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which decides
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
