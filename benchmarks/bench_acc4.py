"""The accuracy_level-4 parity rule's figures for every int4 LLM fixture (tests/llm_accuracy.py):
per step (the prefill and 3 decode steps), max |logits - float reference| / max |reference| for
onyxia and for onnxruntime at accuracy_level 4, the reference being onnxruntime at level 0.

    XDG_RUNTIME_DIR=/tmp .venv/bin/python benchmarks/bench_acc4.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from onyxia.runtime import Runtime  # noqa: E402
from tests.llm_accuracy import SLACK, parity  # noqa: E402
from tests.llm_fixtures import PROMPT, fixtures  # noqa: E402


def main() -> int:
    runtime = Runtime()
    print(f"{'folder':28} {'onyxia per step':36} {'onnxruntime per step':36} worst ratio  holds")
    worst = 0.0
    for fixture in fixtures():
        if not (fixture.is_genai and fixture.precision == "int4"):
            continue
        p = parity(fixture, PROMPT, runtime)
        ratio = max(o / r for o, r in zip(p.ours, p.onnxruntime))
        worst = max(worst, ratio)
        print(f"{fixture.name:28} {' '.join(f'{v:.2e}' for v in p.ours):36} "
              f"{' '.join(f'{v:.2e}' for v in p.onnxruntime):36} {ratio:10.3f}  {p.holds}", flush=True)
    print(f"worst onyxia / onnxruntime distance ratio: {worst:.3f} (the rule allows {SLACK})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
