"""The golden plan summaries: the models (GOLDEN), the rendering of a compiled plan as stable text,
and where each snapshot lives. Shared by tests/unit/test_golden.py (compares) and
tests/golden/update.py (regenerates)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Callable

import onnx

from onyxia.codegen.wgsl import render
from onyxia.plan import CompiledModel, CopyBuffer, Dispatch, Select, ShaderSpec, WriteBuffer
from onyxia.plan.show import run_count
from tests.helpers import compile_model
from tests.models import bert_encoder, gpt2_block

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "golden"
REGENERATE = ".venv/bin/python tests/golden/update.py"


def _tiny_mlp() -> onnx.ModelProto:
    # examples/ is not a package: load the script by path (works from any cwd and installed tests).
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "examples" / "make_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiny_mlp()


# name -> (builder, compile dims). Symbols stay dynamic: the snapshot shows immediates expressions.
GOLDEN: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, int]]] = {
    "tiny_mlp": (_tiny_mlp, {"batch": 2}),
    "bert_encoder": (bert_encoder, {"batch": 2, "seq": 8}),
    "gpt2_block": (lambda: gpt2_block(opset=18, mask="range"), {"batch": 2, "seq": 8}),
}


def _sha(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _value(v: object) -> str:
    """A def value: long generated snippets (index code) by hash, so lines stay readable."""
    text = str(v)
    return f"<{len(text)} chars sha256:{_sha(text, 8)}>" if len(text) > 40 or "\n" in text else text


def _shader_key(spec: ShaderSpec, wgsl: str) -> str:
    return f"{spec.label}@{_sha(wgsl, 8)}"


def plan_summary(name: str, compiled: CompiledModel) -> str:
    """A stable text rendering of the plan (no memory addresses, no dict-order accidents)."""
    wgsl = [render(spec, compiled.templates[spec.template], compiled.dims) for spec in compiled.shaders]
    keys = [_shader_key(spec, text) for spec, text in zip(compiled.shaders, wgsl)]
    meta = compiled.metadata
    memory = meta.get("memory", {})
    lines = [
        f"# onyxia golden plan summary: {name}   (regenerate: {REGENERATE})",
        f"dims: {', '.join(f'{k}={v}' for k, v in sorted(compiled.dims.items()))}"
        f"  static: {sorted(compiled.static_symbols) or '-'}",
        f"nodes: {meta.get('nodes')}  planned: {meta.get('planned_nodes')}  folded: {meta.get('folded_nodes')}"
        f"  dispatches: {compiled.num_dispatches}  shaders: {len(compiled.shaders)}",
        f"selects: {sum(isinstance(s, Select) for s in compiled.steps)}  dispatches run at these dims: "
        + ", ".join(f"{kind} adapter {n}" for kind, n in run_count(compiled).items()),
        f"memory: {', '.join(f'{k}={v}' for k, v in sorted(memory.items())) if isinstance(memory, dict) else memory}",
    ]
    for title, names in (("inputs", compiled.inputs), ("outputs", compiled.outputs)):
        lines.append(f"{title}:")
        for n in names:
            t = compiled.tensors[n]
            lines.append(f"  {n}: {t.dtype} ({t.storage}) [{', '.join(str(d) for d in t.shape)}]")
    lines.append("")
    lines.append("operations:")
    for op in compiled.operations:
        lines.append(f"op {op.name} [{op.op_type}]" + ("  (no steps: view)" if not op.steps else ""))
        if op.scratch:
            lines.append(f"  scratch: {', '.join(op.scratch)}")
        lines += _render_steps(compiled, keys, op.steps, "  ")
    lines.append("")
    lines.append("shaders (first-use order):")
    order = list(dict.fromkeys(s.shader for s in compiled.steps if isinstance(s, Dispatch)))
    order += [i for i in range(len(compiled.shaders)) if i not in order]
    for i in order:
        spec = compiled.shaders[i]
        lines.append(f"shader {keys[i]}  entry={spec.entry_point}  wgsl sha256:{_sha(wgsl[i], 64)}")
        lines.append(f"  defs: {' '.join(f'{k}={_value(v)}' for k, v in spec.defs) or '-'}")
        lines.append(f"  constants: {' '.join(f'{p.name}:{p.type}={v!r}' for p, v in spec.constants) or '-'}")
        lines.append(f"  immediates: {' '.join(f'{p.name}:{p.type}' for p in spec.immediates) or '-'}")
        flags = ("vector", "whole_words", "raw")
        lines.append("  buffers: " + " ".join(
            f"{b.name}:{b.dtype}:{'r' if b.read_only else 'rw'}" + "".join(f"+{f}" for f in flags if getattr(b, f))
            for b in spec.buffers) + ("  reports" if spec.reports else ""))
    return "\n".join(lines) + "\n"


def _render_steps(compiled: CompiledModel, keys: list[str], steps, indent: str) -> list[str]:
    lines = []
    for step in steps:
        if isinstance(step, Dispatch):
            spec = compiled.shaders[step.shader]
            imm = ", ".join(f"{p.name}={v}" for p, v in zip(spec.immediates, step.immediates))
            lines.append(f"{indent}dispatch {keys[step.shader]}  wg=({', '.join(str(w) for w in step.workgroups)})"
                         f"  imm({imm})")
            reads = [b.tensor for b in step.bindings if b.read_only]
            writes = [b.tensor for b in step.bindings if not b.read_only]
            lines.append(f"{indent}  reads: {', '.join(reads) or '-'}  writes: {', '.join(writes)}")
        elif isinstance(step, CopyBuffer):
            lines.append(f"{indent}copy {step.src}[{step.src_offset}:] -> {step.dst}[{step.dst_offset}:]"
                         f"  bytes={step.size}")
        elif isinstance(step, WriteBuffer):
            lines.append(f"{indent}write {step.dst} {step.dtype} [{', '.join(str(d) for d in step.data)}]")
        elif isinstance(step, Select):
            tuned = f"  tuned shape=({', '.join(str(d) for d in step.shape)})" if step.tuned else ""
            lines.append(f"{indent}select {step.key}{tuned}")
            for alt in step.alternatives:
                lines.append(f"{indent}  alternative {alt.label}  guard: {alt.guard}  prefer: {alt.prefer}")
                lines += _render_steps(compiled, keys, alt.steps, indent + "    ")
        else:  # a new step type must be rendered here, not silently dropped
            lines.append(f"{indent}{type(step).__name__} {step!r}")
    return lines


def current_summary(name: str) -> str:
    build, dims = GOLDEN[name]
    return plan_summary(name, compile_model(build(), dims))


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.txt"
