"""LlmSession on tiny decoders built by tests/llm_models.py, against onnxruntime's session loop.

Every variant (grouped KV heads, rotary inside GQA or as RotaryEmbedding nodes, the shared
buffer cache, a sliding window, softcap, packed QKV, QKV bias, int4 with zero points) must
decode greedily token for token like onnxruntime, with last-position logits within 1e-3
relative at every step. Decoding must not recompile, reallocate or read back more than the
token id.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from onyxia.errors import DimensionError, InputError
from onyxia.llm import LlmSession
from onyxia.llm.sampling import Sampler, SamplingParams
from tests.llm_models import EOS, VARIANTS, OrtDecoder, build_decoder

PROMPT = [1, 5, 9, 20, 33, 47, 12]
STEPS = 32


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    return {name: build_decoder(spec, root / name) for name, spec in VARIANTS.items()}


@pytest.fixture(scope="module")
def sessions(model_dirs, runtime):
    cache: dict[str, LlmSession] = {}

    def get(name: str) -> LlmSession:
        if name not in cache:
            cache[name] = LlmSession(model_dirs[name], runtime=runtime)
        return cache[name]

    return get


def assert_logits_close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    # 1e-3 relative to the logits' scale (single logits near zero have no meaningful relative error)
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()), err_msg=what)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_matches_onnxruntime(variant, model_dirs, sessions):
    ref_tokens, ref_logits = OrtDecoder(model_dirs[variant]).greedy(PROMPT, STEPS)
    session = sessions(variant)

    session.reset()
    step = session.forward(PROMPT, last_logits=True)
    for i in range(STEPS):
        assert_logits_close(step.last_logits, ref_logits[i], f"{variant}: logits before token {i}")
        assert step.token == ref_tokens[i], f"{variant}: token {i}"
        if i + 1 < STEPS:
            step = session.forward([step.token], last_logits=True)

    assert session.generate(PROMPT, max_new_tokens=STEPS) == ref_tokens


@pytest.mark.parametrize("variant", ["llama", "llama_shared"])
def test_decode_steps_recompile_reallocate_and_read_back_nothing(variant, sessions):
    session = sessions(variant)
    stats = session.executor.stats
    tokens = session.stream(PROMPT, max_new_tokens=STEPS + 1)
    next(tokens)  # the prefill
    before = (stats.recompiles, stats.reallocs, stats.runs)
    readback = []
    for _ in tokens:
        readback.append(stats.readback_bytes)
    assert len(readback) == STEPS
    assert (stats.recompiles, stats.reallocs, stats.runs) == (before[0], before[1], before[2] + STEPS)
    assert readback == [4] * STEPS  # one int64 token id, stored as one 32-bit word


def test_full_prefill_logits_match(model_dirs, sessions):
    import onnxruntime as ort

    session = sessions("llama")
    session.reset()
    ours = session.forward(PROMPT, logits=True).logits
    ref_session = ort.InferenceSession(str(model_dirs["llama"] / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([PROMPT], np.int64), "attention_mask": np.ones((1, len(PROMPT)), np.int64)}
    feeds.update({i.name: np.zeros((1, 2, 0, 16), np.float32) for i in ref_session.get_inputs() if "past" in i.name})
    ref = ref_session.run(["logits"], feeds)[0][0]
    assert ours.shape == ref.shape
    assert_logits_close(ours, ref, "prefill logits")


def test_sampling_is_seeded_and_matches_host_reference(model_dirs, sessions):
    session = sessions("qwen")
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=7)
    ours = session.generate(PROMPT, max_new_tokens=12, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    assert ours == session.generate(PROMPT, max_new_tokens=12, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    ref, _ = OrtDecoder(model_dirs["qwen"]).run(PROMPT, 12, Sampler(params))
    assert ours == ref
    assert ours != session.generate(PROMPT, max_new_tokens=12, temperature=0.0)


def test_stops_at_eos_and_max_length(sessions):
    session = sessions("llama")
    greedy = session.generate(PROMPT, max_new_tokens=10)
    assert EOS not in greedy
    stop = greedy[4]
    stopped = session.generate(PROMPT, max_new_tokens=10, eos_token_id=stop)
    assert stopped == greedy[:greedy.index(stop) + 1]
    # prompt + generated never exceed max_length
    room = session.max_length - len(PROMPT)
    assert len(session.generate(PROMPT, max_new_tokens=room + 50)) == room


def test_stream_text_decodes_incrementally(sessions):
    session = sessions("phi")
    pieces = list(session.stream_text("the sun and the moon", max_new_tokens=8))
    ids = session.generate(session.encode("the sun and the moon"), max_new_tokens=8)
    assert "".join(pieces) == session.decode(ids)


def test_bad_prompts(sessions):
    session = sessions("llama")
    with pytest.raises(DimensionError, match=f"max_length {session.max_length}"):
        session.generate([5] * session.max_length, max_new_tokens=1)
    with pytest.raises(InputError, match="token id 96 is outside the vocabulary"):
        session.generate([1, 96])
    with pytest.raises(InputError, match="no token ids"):
        session.generate([])
    assert session.generate(PROMPT, max_new_tokens=3) == session.generate(PROMPT, max_new_tokens=5)[:3]


def test_cli_generate_streams_text_and_prints_speed(model_dirs, capsys, monkeypatch, runtime):
    from onyxia import cli
    from onyxia.llm import session as session_module

    # One wgpu device per test process: hand the CLI the session fixture's runtime.
    real = session_module.LlmSession
    monkeypatch.setattr(session_module, "LlmSession", lambda *a, **kw: real(*a, **{**kw, "runtime": runtime}))
    assert cli.main(["generate", str(model_dirs["llama"]), "--prompt", "the sun", "--max-new-tokens", "6"]) == 0
    out, err = capsys.readouterr()
    assert 0 < len(out.split()) <= 6
    assert "prefill" in err and "tokens/s" in err
    assert re.search(r"device memory: [\d.]+ MiB after load, [\d.]+ MiB after \d+ cached tokens", err)
    assert cli.main(["generate", str(model_dirs["llama"]), "--prompt", "x", "--temperature", "-1"]) != 0
    assert "temperature must be" in capsys.readouterr().err


def test_last_token_argmax_picks_first_maximum(runtime):
    """The GPU argmax over a vocabulary wider than a workgroup, ties going to the lower id, in
    both variants (256 threads; 8 on a CPU-type adapter), whatever this adapter is."""
    import onyxia
    from onyxia.compiler import CompilerPipeline
    from onyxia.llm.ops import LAST_LOGITS, NEXT_TOKEN, add_last_token_head, register_llm_operators
    from onyxia.operators import core_operator_registry
    from tests.helpers import helper, make_model

    vocab = 1000
    graph = onyxia.load_model(make_model([helper.make_node("Relu", ["x"], ["logits"])],
                                         [("x", np.float32, [2, "s", vocab])], ["logits"]))
    add_last_token_head(graph, "logits")
    compiled = CompilerPipeline(register_llm_operators(core_operator_registry())).compile(graph, {"s": 5})
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(0)
    cases = ((5, [700, 3, 999]), (1, [256, 255]), (3, [998, 999]), (2, [7, 8, 15]))
    for (s, ties), cpu in itertools.product(cases, (0, 1)):
        exe.update_dimensions({"s": s})
        exe.assume_adapter("cpu" if cpu else "gpu")
        live = {exe.model.shaders[d.shader].label for d in exe.dispatch_commands() if all(d.workgroups)}
        assert {x for x in live if x.startswith("llm/last_token")} == {f"llm/last_token_{8 if cpu else 256}"}, live
        x = rng.random((2, s, vocab), dtype=np.float32)
        x[0, -1, ties] = 2.0
        x[1, -1, ties[-1]] = 3.0
        out = exe.run({"x": x}, outputs=[LAST_LOGITS, NEXT_TOKEN])
        np.testing.assert_array_equal(out[LAST_LOGITS], x[:, -1])
        assert out[NEXT_TOKEN].tolist() == [min(ties), ties[-1]]


def test_prefill_logits_for_the_last_position_only(model_dirs, sessions):
    """A prefill that reads no full logits runs the lm_head on its last row (LastRows): same
    last logits and token as the full projection, which a `logits=True` pass still returns."""
    session = sessions("llama")
    plan_ops = [op.op_type for op in session.compiled.operations]
    assert "LastRows" in plan_ops
    session.reset()
    last = session.forward(PROMPT, last_logits=True)
    session.reset()
    full = session.forward(PROMPT, last_logits=True, logits=True)
    assert full.logits.shape == (len(PROMPT), session.config.vocab_size)
    np.testing.assert_allclose(last.last_logits, full.logits[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(full.last_logits, full.logits[-1])
    assert last.token == full.token


@pytest.mark.parametrize("batch", [1, "b"])
def test_last_rows_keeps_the_last_row_or_all(runtime, batch):
    """LastRows: the last row of each batch entry with the gate 0, every row with 1 (a buffer
    copy for a batch of 1, a strided copy otherwise)."""
    import onyxia
    from onyxia.compiler import CompilerPipeline
    from onyxia.llm.ops import DOMAIN, LOGITS_GATE, register_llm_operators
    from onyxia.operators import core_operator_registry
    from tests.helpers import helper, make_model

    hidden = 6
    graph = onyxia.load_model(make_model([helper.make_node("Relu", ["x"], ["r"]),
                                          helper.make_node("LastRows", ["r"], ["y"], domain=DOMAIN)],
                                         [("x", np.float32, [batch, "s", hidden])], ["y"],
                                         extra_opsets={DOMAIN: 1}))
    dims = {"s": 5, LOGITS_GATE: 1, **({"b": 3} if batch == "b" else {})}
    compiled = CompilerPipeline(register_llm_operators(core_operator_registry())).compile(graph, dims)
    exe = runtime.load_model(compiled)
    rng = np.random.default_rng(0)
    for s, gate in ((5, 0), (5, 1), (1, 0), (3, 1), (4, 0)):
        exe.update_dimensions({"s": s, LOGITS_GATE: gate, **({"b": 2} if batch == "b" else {})})
        x = rng.standard_normal((2 if batch == "b" else 1, s, hidden)).astype(np.float32)
        y = exe.run({"x": x})["y"]
        np.testing.assert_array_equal(y, np.maximum(x, 0) if gate else np.maximum(x[:, -1:], 0))


def test_last_token_over_a_vocabulary_past_the_loop_cut(runtime):
    """Past LAST_TOKEN_CPU_MAX_VOCAB the 8-thread variant's loop would pass lavapipe's ~65,535
    iterations: the plan holds only the 256-thread kernel, and its argmax is right on lavapipe."""
    import onyxia
    from onyxia.compiler import CompilerPipeline
    from onyxia.llm.ops import LAST_TOKEN_CPU_MAX_VOCAB, NEXT_TOKEN, add_last_token_head, register_llm_operators
    from onyxia.operators import core_operator_registry
    from tests.helpers import helper, make_model

    vocab = 8 * 70_000
    assert vocab > LAST_TOKEN_CPU_MAX_VOCAB
    graph = onyxia.load_model(make_model([helper.make_node("Relu", ["x"], ["logits"])],
                                         [("x", np.float32, [1, 1, vocab])], ["logits"]))
    add_last_token_head(graph, "logits")
    exe = runtime.load_model(CompilerPipeline(register_llm_operators(core_operator_registry())).compile(graph, {}))
    x = np.random.default_rng(1).random((1, 1, vocab), dtype=np.float32)
    x[0, 0, vocab - 3] = 2.0
    assert not exe.model.adapter_dependent  # no adapter-dependent variant planned
    assert {s.label for s in exe.model.shaders if s.label.startswith("llm/last_token")} == {"llm/last_token_256"}
    assert exe.run({"x": x}, outputs=[NEXT_TOKEN])[NEXT_TOKEN].tolist() == [vocab - 3]
