"""bench_replay.py on an older revision and on the working tree, alternated in one run.

    python benchmarks/compare_replay.py --before 93bcba7 [--rounds 7] [--repeat 50]

The older revision is exported with `git archive` into a temporary folder and this tree's
bench_replay.py runs there (with that revision's onyxia and tests/models.py), then here, round
after round, so both see the same machine load. Prints, per plan and transport, the median of
the per-round medians of every column, before -> after, and the ratio after/before.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["run() µs", "µs/dispatch", "run() host µs", "encode µs/dispatch", "update_dimensions µs"]


def bench(tree: Path, repeat: int) -> dict[tuple[str, str], list[float]]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_replay.py"), "--repeat", str(repeat)],
                         cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 5 + len(COLUMNS) and parts[2].isdigit():
            rows[(parts[0], parts[1])] = [float(x) for x in parts[5:]]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onyxia-before-") as tmp:
        old = Path(tmp)
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        shutil.copy(ROOT / "benchmarks" / "bench_replay.py", old / "benchmarks" / "bench_replay.py")
        samples: dict[tuple[str, str, str], list[list[float]]] = collections.defaultdict(list)
        for _ in range(args.rounds):
            for label, tree in (("before", old), ("after", ROOT)):
                for key, row in bench(tree, args.repeat).items():
                    samples[(label, *key)].append(row)
    print(f"{args.rounds} rounds x {args.repeat} repeats, medians of the per-round medians; "
          f"before = {args.before}, after = working tree")
    for (label, plan, transport) in sorted(k for k in samples if k[0] == "after"):
        before, after = samples[("before", plan, transport)], samples[(label, plan, transport)]
        print(f"{plan} / {transport}:")
        for i, column in enumerate(COLUMNS):
            b = statistics.median(r[i] for r in before)
            a = statistics.median(r[i] for r in after)
            print(f"  {column:<22} {b:10.2f} -> {a:10.2f}  ({a / b:.2f}x)")


if __name__ == "__main__":
    main()
