"""The plan's status word, read back with a run's outputs (docs/plan-format.md §10).

A kernel that detects a wrong result (an index out of bounds, a lost int64 value read as an
order or another type) sets the word's top bit with its site: the run fails naming that node. A
kernel that loses an int64 value (outside ±(2^31 - 1), the range the GPU holds int64 in; it
stores the mark -2^31, codegen/storage.py) sets its site alone, a note: the run fails only if an
int64 output holds the mark, and then names the noted node. Lost values that no output holds are
harmless (a Where discarding them: T5's log(0) buckets).
"""

from __future__ import annotations

import numpy as np

from onyxia.errors import ComputeError
from onyxia.ir import dtypes
from onyxia.plan import STATUS_ERROR

Site = tuple[str, str, str]  # (node, op type, what its report means)


def read_status(word: int, sites: tuple[Site, ...]) -> Site | None:
    """Raise the error the word holds; else the site that noted a lost int64 value, if any."""
    if not word:
        return None
    site = word & ~STATUS_ERROR
    node, op_type, what = sites[site - 1] if 0 < site <= len(sites) else ("?", "?", f"report {site}")
    if word & STATUS_ERROR:
        raise ComputeError(f"node '{node}' ({op_type}): {what}; its results are wrong, so the run's outputs "
                           "are not returned")
    return node, op_type, what


def refuse_lost(name: str, values: np.ndarray, noted: Site | None) -> None:
    """Raise if int64 output `name` holds the lost-value mark, naming the node that lost it."""
    lost = values == dtypes.INT64_LOST
    if not lost.any():
        return
    where = np.unravel_index(int(np.argmax(lost)), values.shape) if values.ndim else ()
    origin = (f"node '{noted[0]}' ({noted[1]}) gave an int64 value outside ±(2^31 - 1), the range the GPU holds "
              "int64 in" if noted else "an int64 value is -2^31 or outside ±(2^31 - 1), the range the GPU holds "
              "int64 in")
    count = int(lost.sum())
    raise ComputeError(f"output '{name}'{list(map(int, where))}: {origin}; onyxia does not return it "
                       f"({count} such value{'s' if count > 1 else ''})")


__all__ = ["read_status", "refuse_lost"]
