"""Seq2SeqSession: greedy encoder-decoder generation for optimum's Whisper, T5 and BART exports
(merged and split decoders), token for token equal to a plain onnxruntime loop over the same
files; Whisper's log-mel features against transformers' feature extractor (precomputed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onyxia
from onyxia.errors import ConfigError, InputError
from onyxia.llm.audio import FeatureConfig, log_mel, read_wav
from tests.ort_oracle import exact_session

SEQ2SEQ = Path(__file__).resolve().parent.parent / "data" / "exported" / "seq2seq"
NEW_TOKENS = 32


def ort_greedy(folder: Path, encoder_feeds: dict[str, np.ndarray], prompt: list[int], new_tokens: int,
               eos: int | None) -> list[int]:
    """The plain onnxruntime loop: the encoder once; the decoder first on the whole prompt
    without a cache, then one token at a time with the presents fed back as pasts (the first
    step's cross-attention KV for every later step); argmax of the last position's logits."""
    def session(name: str):  # exact integer products on CPUs without VNNI too (tests/ort_oracle.py)
        return exact_session(folder / name)

    (states,) = session("encoder_model.onnx").run(["last_hidden_state"], encoder_feeds)
    merged = (folder / "decoder_model_merged.onnx").is_file()
    first = session("decoder_model_merged.onnx" if merged else "decoder_model.onnx")
    later = first if merged else session("decoder_with_past_model.onnx")
    mask = encoder_feeds.get("attention_mask")
    past: dict[str, np.ndarray] = {}
    ids, new = np.array([prompt], np.int64), []
    for step in range(new_tokens):
        sess = first if step == 0 else later
        feeds = {"input_ids": ids}
        for arg in sess.get_inputs():
            if arg.name == "encoder_hidden_states":
                feeds[arg.name] = states
            elif arg.name == "encoder_attention_mask":
                feeds[arg.name] = mask
            elif arg.name == "use_cache_branch":
                feeds[arg.name] = np.array([step > 0])
            elif arg.name.startswith("past_key_values."):
                if step == 0:  # ignored by the branch without a cache
                    length = states.shape[1] if ".encoder." in arg.name else 0
                    feeds[arg.name] = np.zeros((1, arg.shape[1], length, arg.shape[3]), np.float32)
                else:
                    feeds[arg.name] = past[arg.name]
        names = [o.name for o in sess.get_outputs()]
        outs = dict(zip(names, sess.run(names, feeds)))
        for name, value in outs.items():
            if name.startswith("present.") and (".decoder." in name or step == 0):
                past["past_key_values." + name[len("present."):]] = value
        token = int(np.argmax(outs["logits"][0, -1]))
        if token == eos:
            break
        new.append(token)
        ids = np.array([[token]], np.int64)
    return new


CASES = [(m, layout) for m in ("whisper", "t5", "bart") for layout in ("merged", "split")]
# Made by onnxruntime's quantizers from the merged folders (tools/quantize_models.py): q8 =
# quantize_dynamic (DynamicQuantizeLinear + MatMulInteger, fused into one kernel per product), q4
# = MatMulNBitsQuantizer (MatMulNBits).
CASES += [("whisper", "merged-q8"), ("t5", "merged-q8"), ("bart", "merged-q8"), ("whisper", "merged-q4")]


@pytest.mark.parametrize("model, layout", CASES, ids=[f"{m}-{layout}" for m, layout in CASES])
def test_greedy_tokens_equal_an_onnxruntime_loop(runtime, model, layout):
    folder = SEQ2SEQ / model / layout
    sess = onyxia.Seq2SeqSession(folder, max_length=48, runtime=runtime)
    if model == "whisper":
        source = np.load(folder / "features_ref.npz")["audio"]
        prompt = sess.prompt(task="transcribe")
        assert len(prompt) == 4  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    else:
        source = [5, 17, 33, 8, 61, 1]
        prompt = sess.prompt()
    ours = sess.generate(source, NEW_TOKENS, task="transcribe" if model == "whisper" else None)
    ref = ort_greedy(folder, sess.encoder_feeds(source), prompt, NEW_TOKENS, sess.eos)
    assert ours == ref and len(ref) == NEW_TOKENS  # no eos within 32 tokens: all 32 compared
    assert len(set(ref)) > 1  # the random weights do not just repeat one token
    # A second input reuses the plans (one per decoder file), only changing dims.
    second = [9, 4, 70, 22] if model != "whisper" else source[::-1].copy()
    assert sess.generate(second, 8) == ort_greedy(folder, sess.encoder_feeds(second), prompt, 8, sess.eos)
    assert len(sess._decoders) == (1 if layout.startswith("merged") else 2)
    for plan in sess._decoders.values():
        assert plan.executor.stats.reallocs == 0 and plan.executor.stats.recompiles == 0


def test_generation_reads_back_one_token_id_per_step(runtime):
    sess = onyxia.Seq2SeqSession(SEQ2SEQ / "bart" / "merged", max_length=16, runtime=runtime)
    sess.generate([5, 6, 7], 4)
    (plan,) = sess._decoders.values()
    assert plan.executor.stats.readback_bytes == 4  # the token id (int64 lives in 32 bits); KV stays on the device


def test_whisper_log_mel_matches_the_feature_extractor():
    folder = SEQ2SEQ / "whisper" / "merged"
    ref = np.load(folder / "features_ref.npz")
    ours = log_mel(ref["audio"], FeatureConfig.from_folder(folder))
    assert ours.shape == ref["input_features"].shape == (80, 100)
    np.testing.assert_allclose(ours, ref["input_features"], atol=2e-5)


def test_wav_files_are_read_as_mono_floats(tmp_path):
    import wave
    samples = (np.sin(np.arange(800) / 10) * 20000).astype(np.int16)
    path = tmp_path / "a.wav"
    with wave.open(str(path), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(2)
        f.setframerate(8000)
        f.writeframes(np.stack([samples, samples], 1).tobytes())
    audio = read_wav(path, 16000)
    assert audio.shape == (1600,)
    np.testing.assert_allclose(audio[::2], samples / 32768.0, atol=1e-6)
    (tmp_path / "bad.wav").write_bytes(b"RIFF....")
    with pytest.raises(InputError, match="bad.wav: not a readable PCM WAV file"):
        read_wav(tmp_path / "bad.wav", 16000)


def test_bad_folders_and_inputs_say_what_is_wrong(runtime, tmp_path):
    with pytest.raises(ConfigError, match="no encoder_model.onnx"):
        onyxia.Seq2SeqSession(tmp_path, runtime=runtime)
    sess = onyxia.Seq2SeqSession(SEQ2SEQ / "whisper" / "merged", max_length=8, runtime=runtime)
    with pytest.raises(InputError, match="task 'summarize' is not one of the model's"):
        sess.prompt(task="summarize")
    with pytest.raises(InputError, match=r"input features have shape \[80, 7\], the model takes \[80, 100\]"):
        sess.generate(np.zeros((80, 7), np.float32), 2)
    with pytest.raises(InputError, match="exceed max_length 8"):
        sess.generate(np.zeros(100, np.float32), 6)
    text = onyxia.Seq2SeqSession(SEQ2SEQ / "t5" / "merged", runtime=runtime)
    with pytest.raises(InputError, match="non-empty 1-D integer"):
        text.generate([[1, 2]], 2)


def test_onyxia_generate_runs_encoder_decoder_folders(runtime, monkeypatch, capsys, tmp_path):
    import wave

    from onyxia import cli
    from onyxia.llm import seq2seq

    real = seq2seq.Seq2SeqSession
    monkeypatch.setattr(seq2seq, "Seq2SeqSession", lambda *a, **kw: real(*a, **{**kw, "runtime": runtime}))
    folder = SEQ2SEQ / "bart" / "merged"
    assert cli.main(["generate", str(folder), "--prompt", "w10 w11 w12", "--max-new-tokens", "5"]) == 0
    out, err = capsys.readouterr()
    sess = real(folder, runtime=runtime)
    ids = sess.tokenizer().encode("w10 w11 w12").ids
    assert out.strip() == sess.decode(sess.generate(ids, 5)) and "tokens in" in err
    audio = np.load(SEQ2SEQ / "whisper" / "split" / "features_ref.npz")["audio"]
    path = tmp_path / "speech.wav"
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes())
    whisper = SEQ2SEQ / "whisper" / "split"
    assert cli.main(["generate", str(whisper), "--audio", str(path), "--task", "transcribe",
                     "--max-new-tokens", "4"]) == 0
    out, _ = capsys.readouterr()
    sess = real(whisper, runtime=runtime)
    assert out.strip() == sess.decode(sess.generate(str(path), 4, task="transcribe"))
    assert cli.main(["generate", str(whisper), "--prompt", "hello"]) != 0
    assert "a Whisper folder transcribes --audio WAV" in capsys.readouterr().err
