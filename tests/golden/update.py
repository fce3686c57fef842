"""Regenerate the golden plan snapshots that tests/unit/test_golden.py compares against.

    .venv/bin/python tests/golden/update.py                  # every model
    .venv/bin/python tests/golden/update.py bert_encoder     # only some

Review `git diff tests/golden/` afterwards: every changed line is a change of the compiled plan.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make `tests` and `onyxia` importable

from tests.golden.summary import GOLDEN, current_summary, golden_path  # noqa: E402


def main(argv: list[str]) -> int:
    names = argv or sorted(GOLDEN)
    unknown = [n for n in names if n not in GOLDEN]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {', '.join(sorted(GOLDEN))}", file=sys.stderr)
        return 2
    for name in names:
        path = golden_path(name)
        text = current_summary(name)
        old = path.read_text() if path.exists() else None
        path.write_text(text)
        state = "created" if old is None else ("unchanged" if old == text else "updated")
        print(f"{state:9} {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
