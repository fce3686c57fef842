"""The web bundle: a compiled plan laid out for the JavaScript runtime (onyxia/web/onyxia.js).

A folder holding
  model.json        {"format": "onyxia-web", "version": 1, "plan": the plan.json document
                    (docs/plan-format.md) without its templates, "wgsl": [text, ...], "shaders":
                    [{variant: index into wgsl}, ...] (one entry per plan shader), "weights":
                    {tensor: [chunk, byte offset, nbytes]}, "chunks": [[file, nbytes], ...]}
  weights_N.bin     the weights in device encoding (docs/plan-format.md §6: ONNX raw bytes padded
                    to a word, 64-bit integers as 32-bit words), each tensor word-aligned, no
                    chunk over CHUNK_BYTES (a browser fetches a few tens of MB comfortably).

Shaders come rendered, with the uniform parameter transport (browsers have no immediates), for
each adapter variant a JavaScript replay can meet: native f16 or packed words (shader-f16), packed
f16 vec4 reads (a CPU-type adapter with shader-f16, as the Python runtime's default), subgroups.
The WGSL is therefore the Python runtime's own (codegen/wgsl.render), which is what makes the two
replays compute the same bits on the same adapter; the JS side needs no preprocessor. The cost: a
static symbol (`--static`) is baked at the compile dims, and the JS runtime refuses to change it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from onyxia.codegen.transport import UNIFORM
from onyxia.codegen.wgsl import render
from onyxia.errors import InputError, OnyxiaError, PlanError
from onyxia.ir import dtypes
from onyxia.plan import BranchStep, CompiledModel, LoopStep, ReadSymbol, plan_document, walk_steps

BUNDLE_FORMAT = "onyxia-web"
BUNDLE_VERSION = 1
MANIFEST = "model.json"
CHUNK_BYTES = 32 << 20
# (native f16, packed f16 vec4 reads, subgroups): the variant key the JS runtime builds is
# "f16" / "packed" / "sg" flags as "1"/"0", e.g. "100" for shader-f16 on a GPU-type adapter.
VARIANTS = [(f16, packed, sg) for f16 in (False, True) for packed in ((False, True) if f16 else (False,))
            for sg in (False, True)]


def variant_key(f16: bool, packed: bool, subgroups: bool) -> str:
    return "".join("1" if flag else "0" for flag in (f16, packed, subgroups))


# Tint (Chrome, Dawn) refuses a NaN or an infinity produced by a constant expression, as the
# WGSL spec says; naga accepts `bitcast<f32>(0x7fc00000u)`. A call of a user function is never a
# constant expression, so routing the bits through one keeps the same value at run time.
_SPECIAL_FLOAT = re.compile(r"bitcast<f32>\((0x7fc00000u|0x7f800000u|0xff800000u)\)")
_BITS_FN = "\nfn onyxia_runtime_bits(b: u32) -> u32 { return b; }\n"


def portable(code: str) -> str:
    """`code` with NaN/infinity constants evaluated at run time (see _SPECIAL_FLOAT)."""
    code, count = _SPECIAL_FLOAT.subn(r"bitcast<f32>(onyxia_runtime_bits(\1))", code)
    return code + _BITS_FN if count else code


def rendered_shaders(model: CompiledModel) -> tuple[list[str], list[dict[str, int]]]:
    """(distinct WGSL texts, per shader {variant key: text index}) at the plan's dims."""
    texts: list[str] = []
    index: dict[str, int] = {}
    per_shader: list[dict[str, int]] = []
    for spec in model.shaders:
        variants: dict[str, int] = {}
        for f16, packed, sg in VARIANTS:
            code = render(spec, model.templates[spec.template], model.dims, UNIFORM, native_f16=f16,
                          packed_f16_reads=packed, subgroups=sg, wide_reads=False)
            if sg and code != render(spec, model.templates[spec.template], model.dims, UNIFORM,
                                     native_f16=f16, packed_f16_reads=packed, wide_reads=False):
                code = "enable subgroups;\n" + code  # WebGPU asks for it; naga does not
            code = portable(code)
            if code not in index:
                index[code] = len(texts)
                texts.append(code)
            variants[variant_key(f16, packed, sg)] = index[code]
        per_shader.append(variants)
    return texts, per_shader


HOST_STEP_KINDS = {BranchStep: "branch", LoopStep: "loop", ReadSymbol: "read_symbol"}


def host_steps(model: CompiledModel) -> list[tuple[str, str, str]]:
    """(node, op type, step kind) of every step that needs the host between dispatches."""
    found: dict[str, tuple[str, str, str]] = {}
    for op in model.operations:
        for step in walk_steps(op.steps):
            kind = HOST_STEP_KINDS.get(type(step))
            if kind and op.name not in found:
                found[op.name] = (op.name, op.op_type, kind)
    return list(found.values())


def write_bundle(model: CompiledModel, out_dir: str | Path, *, chunk_bytes: int = CHUNK_BYTES) -> Path:
    """Write model.json and the weight chunks into `out_dir` (created); returns the manifest."""
    host = host_steps(model)
    if host:  # the JS runtime would refuse the bundle at load; say so before writing it
        shown = ", ".join(f"'{node}' ({op_type}: a {kind} step)" for node, op_type, kind in host[:5])
        raise PlanError(f"{len(host)} node(s) need host control flow, which the web runtime does not replay yet "
                        f"(If/Loop/Scan branches and loops, counts read back from data): {shown}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc, _arrays = plan_document(model)
    doc["templates"] = {}  # rendered below; the JS runtime has no preprocessor
    texts, per_shader = rendered_shaders(model)
    weights: dict[str, list[int]] = {}
    chunks: list[list] = []
    current = bytearray()

    def flush() -> None:
        if current:
            name = f"weights_{len(chunks)}.bin"
            (out / name).write_bytes(bytes(current))
            chunks.append([name, len(current)])
            current.clear()

    for tensor in model.tensors.values():
        if tensor.data is None:
            continue
        dtype = dtypes.from_name(tensor.dtype)
        raw = np.ascontiguousarray(dtypes.to_device(np.asarray(tensor.data), dtype, f"weight '{tensor.name}'"))
        data = raw.tobytes()
        data += b"\0" * (-len(data) % 4)
        if len(data) > chunk_bytes:
            raise OnyxiaError(f"weight '{tensor.name}' is {len(data)} bytes, more than one chunk "
                              f"({chunk_bytes} bytes) may hold")
        if len(current) + len(data) > chunk_bytes:
            flush()
        weights[tensor.name] = [len(chunks), len(current), len(data)]
        current += data
    flush()
    manifest = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "plan": doc, "wgsl": texts,
                "shaders": per_shader, "weights": weights, "chunks": chunks}
    path = out / MANIFEST
    path.write_text(json.dumps(manifest))
    return path


def sample_feeds(model: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs at the plan's dims (floats normal, integers in [0, 8), bools fair)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name in model.inputs:
        tensor = model.tensors[name]
        shape = tuple(int(d.evaluate(model.dims)) if hasattr(d, "evaluate") else int(d) for d in tensor.shape)
        dtype = dtypes.from_name(tensor.dtype).numpy
        if dtype == np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 8, size=shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


RUNTIME_FILE = Path(__file__).with_name("onyxia.js")
RUNTIME_FILES = ("onyxia.js", "data.js")  # the runtime's ES modules (onyxia.js imports data.js)
DEMO_FILE = Path(__file__).with_name("index.html")


def copy_runtime(out_dir: Path, names: tuple[str, ...] = RUNTIME_FILES) -> None:
    """onyxia/web's JavaScript modules `names` into `out_dir`."""
    for name in names:
        (out_dir / name).write_text(RUNTIME_FILE.with_name(name).read_text())


def write_demo(model: CompiledModel, out_dir: str | Path, feeds: Mapping[str, np.ndarray] | None = None) -> Path:
    """The whole web folder: bundle, runtime, index.html and sample_inputs.npz (the inputs the page
    runs: `feeds`, random at the plan's dims for inputs not given). Returns the folder."""
    unknown = sorted(set(feeds or {}) - set(model.inputs))
    if unknown:
        raise InputError(f"sample inputs {unknown} are not inputs of the model (inputs: {', '.join(model.inputs)})")
    out = Path(out_dir)
    write_bundle(model, out)
    np.savez(out / "sample_inputs.npz", **{**sample_feeds(model), **dict(feeds or {})})
    copy_runtime(out)
    (out / "index.html").write_text(DEMO_FILE.read_text())
    return out
