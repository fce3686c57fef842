"""The accuracy_level-4 parity rule for int4 LLM folders (MatMulNBits accuracy_level 4).

At accuracy_level 4 onnxruntime quantizes each MatMulNBits activation row to int8 before the
product, and which side of a rounding midpoint a value lands on depends on the host CPU's
instruction set (MLAS), so token equality with onnxruntime is not a sound criterion there. The
rule instead: onyxia's logits are no further from the float-activation reference (the same folder
at accuracy_level 0 on onnxruntime: dequantized weights times float activations) than
onnxruntime's own accuracy-4 logits are, per folder, at the prefill and at 3 decode steps. All
three engines are fed the same tokens (the reference's greedy ones), so one near tie cannot
shift the steps after it. Token equality stays the rule at accuracy_level 0.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.llm_fixtures import Fixture, explicit_qk_norm, ort_loop, window_rows

STEPS = 4  # the prefill and 3 decode steps
# onnxruntime's and onyxia's int8 roundings differ at midpoints (different f32 sums of the same
# values): a step's distance may exceed onnxruntime's by a rounding step's worth, but a kernel
# that quantized coarser or dropped the zero point would be several times further.
SLACK = 1.25


@dataclass(frozen=True)
class Parity:
    folder: str
    ours: list[float]  # per step: max |logits - reference| / max |reference|
    onnxruntime: list[float]

    @property
    def holds(self) -> bool:
        return all(o <= SLACK * r + 1e-6 for o, r in zip(self.ours, self.onnxruntime))


def _levels(fixture: Fixture, level: int, scratch: Path) -> Path:
    """The folder's decoder with every MatMulNBits at accuracy_level `level`, written beside a
    copy of its external data (onnxruntime refuses data paths that leave the model's folder)."""
    import onnx

    src = fixture.path / fixture.model_file
    model = onnx.load(str(src), load_external_data=False)
    explicit_qk_norm(model)  # onnxruntime's CPU GroupQueryAttention has no q/k-norm inputs
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i = level
    out = scratch / f"level{level}"
    out.mkdir(parents=True, exist_ok=True)
    for data in src.parent.glob(src.name + ".data"):
        if not (out / data.name).exists():
            shutil.copyfile(data, out / data.name)
    onnx.save(model, str(out / src.name))
    return out / src.name


def _ort_logits(model_path: Path, config, prompt: list[int], forced: list[int] | None, steps: int
                ) -> tuple[list[np.ndarray], list[int]]:
    """Last-position logits of a plain onnxruntime loop (present fed back as past) and the tokens
    it was fed after the prompt: `forced`, or its own greedy ones."""
    import onnx
    import onnxruntime as ort

    capacity = window_rows(onnx.load(str(model_path), load_external_data=False), config, 1 << 30)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
    heads, head = config.decoder.num_key_value_heads, config.decoder.head_size
    past = {i.name: np.zeros((1, heads, capacity.get(i.name, 0), head), dtype[i.type])
            for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    fed, logits = ort_loop(session, past, prompt, steps, forced)
    return logits, fed


def _distance(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float32) - ref).max() / np.abs(ref).max())


def parity(fixture: Fixture, text: str, runtime, steps: int = STEPS) -> Parity:
    """The rule's distances for `fixture` with the prompt `text` (encoded by the folder's tokenizer)."""
    from onyxia.llm import LlmSession
    from onyxia.llm.hf_config import load_model_config

    config = load_model_config(fixture.path, fixture.decoder)
    session = LlmSession(fixture.path, 128, runtime=runtime, decoder=fixture.decoder)
    prompt = session.encode(text)
    with tempfile.TemporaryDirectory(prefix="onyxia-acc4-") as tmp:
        reference, tokens = _ort_logits(_levels(fixture, 0, Path(tmp)), config, prompt, None, steps)
        theirs, _ = _ort_logits(_levels(fixture, 4, Path(tmp)), config, prompt, tokens, steps)
    ours = [session.forward(prompt, last_logits=True).last_logits]
    for token in tokens[:steps - 1]:
        ours.append(session.forward([token], last_logits=True).last_logits)
    return Parity(fixture.name, [_distance(o, r) for o, r in zip(ours, reference)],
                  [_distance(t, r) for t, r in zip(theirs, reference)])
