"""Golden plan snapshots: a refactor must not change the compiled plan unless it says why.

Regenerate every snapshot (after an intended change to kernels, planning or passes) with ONE command:

    .venv/bin/python tests/golden/update.py            # all models; or name some: ... update.py bert_encoder

then review `git diff tests/golden/` and commit it with the change that caused it.

For a few models (the tiny MLP of examples/make_examples.py, a BERT encoder and a GPT-2 block from
tests/models.py) the compiled plan is rendered as readable text — per planned op its name, op type
and steps (shader label, workgroup and immediate expressions, buffers read and written), then per
shader its defs, baked constants, immediates and the sha256 of its rendered WGSL
(`onyxia.codegen.wgsl.render(spec, compiled.templates[spec.template], compiled.dims)`) — and
compared with tests/golden/<model>.txt.
A mismatch fails with a unified diff. (Like tinygrad's process replay, in spirit.)
"""

from __future__ import annotations

import difflib

import pytest

from tests.golden.summary import GOLDEN, GOLDEN_DIR, REGENERATE, ROOT, current_summary, golden_path

_MAX_DIFF_LINES = 300


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_plan_matches_golden(name: str) -> None:
    path = golden_path(name)
    if not path.exists():
        pytest.fail(f"no snapshot {path.relative_to(ROOT)}: create it with `{REGENERATE} {name}`", pytrace=False)
    expected, actual = path.read_text(), current_summary(name)
    if actual == expected:
        return
    diff = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                     f"tests/golden/{name}.txt (snapshot)", "compiled now", n=2, lineterm=""))
    shown = diff[:_MAX_DIFF_LINES] + ([f"... {len(diff) - _MAX_DIFF_LINES} more diff lines"]
                                      if len(diff) > _MAX_DIFF_LINES else [])
    pytest.fail(f"the compiled plan of '{name}' changed. If intended, regenerate with `{REGENERATE}` "
                "and commit the snapshot with the reason; otherwise this is a regression.\n" + "\n".join(shown),
                pytrace=False)


def test_summary_is_deterministic() -> None:
    # Two compiles of the same model must render identically, or the snapshots would be flaky.
    assert current_summary("gpt2_block") == current_summary("gpt2_block")


def test_no_stale_snapshots() -> None:
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.txt") if p.stem not in GOLDEN)
    assert not stale, f"snapshots without a model in GOLDEN (delete them): {stale}"
