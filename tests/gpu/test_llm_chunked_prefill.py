"""Chunked prefill: a prompt longer than `prefill_length` runs as several prefill steps over the
growing cache (onyxia/llm/session.py) and gives the logits a one-shot prefill gives.

Folders as the exporters wrote them (tests/data/llm/): onnxruntime-genai's shared past/present
buffer (Llama), its sliding-window caches (Gemma-2, whose window is shorter than the prompt, so
chunks cross it) and Optimum's present -> past copies (Qwen2). The chunk boundaries fall
mid-prompt at several sizes; every position's logits are compared, then greedy tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from onyxia.errors import DimensionError, InputError
from onyxia.llm import LlmSession
from tests.llm_fixtures import DATA

pytestmark = pytest.mark.gpu

FOLDERS = ["genai/llama-cpu-fp32", "genai/gemma2-cpu-fp32", "optimum/qwen2"]
PROMPT = [(7 * i + 3) % 90 + 2 for i in range(37)]  # longer than the fixtures' sliding window
MAX_LENGTH = 96


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.fixture(scope="module")
def one_shot(runtime):
    cache = {}

    def get(folder: str) -> LlmSession:
        if folder not in cache:
            cache[folder] = LlmSession(DATA / folder, MAX_LENGTH, runtime=runtime, prefill_length=MAX_LENGTH)
        return cache[folder]
    return get


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("chunk", [5, 16])
def test_chunked_prefill_equals_one_shot(folder, chunk, one_shot, runtime):
    whole = one_shot(folder)
    whole.reset()
    ref = whole.forward(PROMPT, logits=True)
    chunked = LlmSession(DATA / folder, MAX_LENGTH, runtime=runtime, prefill_length=chunk)
    assert chunked.prefill_length == chunk
    ours = chunked.forward(PROMPT, logits=True)
    assert ours.logits.shape == ref.logits.shape == (len(PROMPT), ref.logits.shape[1])
    assert _rel(ours.logits, ref.logits) <= 1e-3, folder
    assert ours.token == ref.token
    # Generation on top of a chunked prefill: the same greedy tokens as the one-shot session.
    assert chunked.generate(PROMPT, max_new_tokens=8) == whole.generate(PROMPT, max_new_tokens=8)


def test_default_chunk_is_bounded_not_max_length(runtime):
    session = LlmSession(DATA / FOLDERS[0], 200, runtime=runtime)
    assert session.prefill_length == 200  # max_length below the default chunk
    from onyxia.llm.session import PREFILL_CHUNK
    assert PREFILL_CHUNK < 1024
    with pytest.raises(InputError, match="prefill_length must be an integer >= 1"):
        LlmSession(DATA / FOLDERS[0], 64, runtime=runtime, prefill_length=0)
    with pytest.raises(DimensionError, match="the prompt has 64 tokens; max_length 64"):
        session = LlmSession(DATA / FOLDERS[0], 64, runtime=runtime, prefill_length=8)
        session.generate([5] * 64, max_new_tokens=1)


@pytest.mark.parametrize("folder", FOLDERS)
def test_cache_grows_on_demand(folder, one_shot, runtime):
    """A session that starts with 8 cache rows doubles them as the generation needs (3 times for
    37 + 12 tokens), keeps what is cached across each regrowth, and generates the tokens of a
    session that had every row from the start; device memory grows with it."""
    whole = one_shot(folder)
    small = LlmSession(DATA / folder, MAX_LENGTH, runtime=runtime, prefill_length=6, cache_rows=8)
    loaded = small.device_bytes
    assert small.cache_rows == 8
    tokens = small.generate(PROMPT, max_new_tokens=12)
    assert tokens == whole.generate(PROMPT, max_new_tokens=12)
    assert small.cache_rows == 64 and small.device_bytes > loaded
    assert small.executor.stats.recompiles == 0
    small.reset()
    ours = small.forward(PROMPT[:20], logits=True).logits  # a regrown cache serves a new prompt too
    whole.reset()
    assert _rel(ours, whole.forward(PROMPT[:20], logits=True).logits) <= 1e-3


def test_long_context_folder_as_written(runtime):
    """The builder's folder with context_length / search.max_length 4096 left as written loads with
    1024 cache rows, and a 3,000-token prompt prefilled in 512-token chunks (the cache doubling
    twice on the way) gives onnxruntime's one-shot logits at every position."""
    import onnxruntime as ort

    folder = DATA / "long" / "llama-long-cpu-fp32"
    session = LlmSession(folder, runtime=runtime)
    assert (session.max_length, session.prefill_length, session.cache_rows) == (4096, 512, 1024)
    loaded = session.device_bytes
    prompt = [(13 * i + 5) % 500 + 4 for i in range(3000)]
    ours = session.forward(prompt, logits=True).logits
    assert session.cache_rows == 4096 and session.device_bytes > loaded

    ref_session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([prompt], np.int64), "attention_mask": np.ones((1, len(prompt)), np.int64)}
    head = session.config.decoder.head_size
    feeds.update({i.name: np.zeros((1, session.config.decoder.num_key_value_heads, 0, head), np.float32)
                  for i in ref_session.get_inputs() if i.name.startswith("past_key_values.")})
    ref = ref_session.run(["logits"], feeds)[0][0]
    assert _rel(ours, ref) <= 1e-3


def test_optimum_folder_with_a_128k_context_loads_as_written(one_shot, runtime, tmp_path):
    """Optimum copies the checkpoint's max_position_embeddings into config.json (131072 for
    Llama-3.x): the session takes it as max_length, allocates 1024 cache rows, not 131072, and
    generates the tokens of a session with a short max_length."""
    import json
    import shutil

    folder = tmp_path / "qwen2-128k"
    shutil.copytree(DATA / "optimum" / "qwen2", folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 131072
    (folder / "config.json").write_text(json.dumps(config))
    session = LlmSession(folder, runtime=runtime)
    assert (session.max_length, session.cache_rows) == (131072, 1024)
    tokens = session.generate(PROMPT, max_new_tokens=8)
    assert tokens == one_shot("optimum/qwen2").generate(PROMPT, max_new_tokens=8)
