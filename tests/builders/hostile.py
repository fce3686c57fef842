"""Builders shared by the hostile-input cases, and the helpers a case runs in its child process.

Every function here runs inside the isolated child (see isolate.py): it may create a wgpu
device, compile and run, and compares with the oracle itself (onnxruntime, else onnx.reference).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h

from tests.helpers import make_model

__all__ = ["TensorProto", "compile_and_run", "decoder_folder", "external_model", "h", "make_model",
           "onyxia_vs_reference", "relu_model"]


def relu_model(*shape: object) -> onnx.ModelProto:
    """y = Relu(x), x of `shape` (ints and dim_param strings; default [4])."""
    return make_model([h.make_node("Relu", ["x"], ["y"], name="relu")], [("x", np.float32, list(shape or [4]))],
                      ["y"])


def external_model(folder: Path, location: str = "w.bin", values: np.ndarray | None = None) -> onnx.ModelProto:
    """y = x + w with w (8 floats) in external file `location` (relative to `folder`).

    The data file is written at folder/w.bin; the model's location field says `location`, which
    a case points elsewhere (../, absolute, a symlink...)."""
    w = np.arange(8, dtype=np.float32) if values is None else values
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(w.tobytes())
    model = make_model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [("x", np.float32, [8])], ["y"],
                       {"w": w})
    init = model.graph.initializer[0]
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    return model


def compile_and_run(model: onnx.ModelProto | bytes | str, feeds: Mapping[str, np.ndarray],
                    dims: Mapping[str, int] | None = None, base_dir: str | None = None) -> dict[str, np.ndarray]:
    import onyxia
    from onyxia.compiler import CompilerPipeline

    graph = onyxia.load_model(model, base_dir) if base_dir else onyxia.load_model(model)
    compiled = CompilerPipeline(onyxia.core_operator_registry()).compile(graph, dict(dims or {}))
    return onyxia.Runtime().load_model(compiled).run(dict(feeds))


def reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], oracle: str = "onnxruntime") -> list[np.ndarray]:
    """onnxruntime's outputs; onnx.reference where onnxruntime lacks the opset, or where the case
    asks for it (`oracle="onnx.reference"`: numpy's pairwise sums, where onnxruntime's f32 running
    sums drift)."""
    try:
        if oracle == "onnx.reference":
            raise LookupError(oracle)
        import onnxruntime as ort

        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - e.g. an opset newer than this onnxruntime
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, dict(feeds))
    return sess.run(None, dict(feeds))


def onyxia_vs_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                        dims: Mapping[str, int] | None = None, rtol: float = 1e-4, atol: float = 1e-5,
                        oracle: str = "onnxruntime") -> None:
    """Assert onyxia computes what the reference computes (NaNs in the same places)."""
    ours = compile_and_run(model, feeds, dims)
    names = [o.name for o in model.graph.output]
    for name, expected in zip(names, reference(model, feeds, oracle)):
        got = ours[name]
        assert got.shape == expected.shape, f"{name}: shape {got.shape}, reference {expected.shape}"
        if np.issubdtype(expected.dtype, np.floating):
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=name)


def decoder_folder(folder: Path, **config_edits: object) -> Path:
    """A tiny genai decoder folder (tests/llm_models.py) with genai_config.json fields edited:
    `config_edits` maps dotted paths ("model.decoder.filename") to new values."""
    from tests.llm_models import DecoderSpec, build_decoder

    build_decoder(DecoderSpec(num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=1,
                              intermediate_size=32, vocab_size=64, context_length=32, max_length=32),
                  folder)
    config_path = folder / "genai_config.json"
    config = json.loads(config_path.read_text())
    for dotted, value in config_edits.items():
        *parents, last = dotted.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value
    config_path.write_text(json.dumps(config))
    return folder


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """`onyxia ARGV` in this process: (exit code, stdout, stderr). An exception escaping main()
    is what a user would see as a traceback, so it propagates to the case's outcome."""
    import contextlib
    import io

    from onyxia.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()
