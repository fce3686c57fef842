"""The container of a plan file: a zip of `plan.json` and one `data_N.npy` per constant.

Checked before anything is inflated (load_plan, step 1 of onyxia/plan/check.py's list): members
are exactly `plan.json` and `data_N.npy` names, none twice (zip allows that; the last would win),
none with a path or encrypted; their declared sizes add up to at most the decompressed-size cap,
and reads never go past a member's declared size, so a member that inflates to gigabytes is
refused unread. Violations are PlanErrors naming the member.
"""

from __future__ import annotations

import re
import zipfile

import numpy as np

from onyxia.errors import PlanError
from onyxia.ir import dtypes

PLAN_JSON = "plan.json"
MAX_PLAN_JSON_BYTES = 256 << 20
DEFAULT_MAX_PLAN_BYTES = 32 << 30  # decompressed, all members together
_NPY_HEADER_SLACK = 1 << 16  # an .npy header is at most 64 KiB (format 2.0)
DATA_MEMBER = re.compile(r"data_[0-9]{1,9}")


def _fail(where: str, message: str) -> PlanError:
    return PlanError(f"{where}: {message}" if where else message)


def check_members(zf: zipfile.ZipFile, max_bytes: int = DEFAULT_MAX_PLAN_BYTES) -> dict[str, zipfile.ZipInfo]:
    """{member name: ZipInfo}; refuses duplicates, foreign names and an oversized total."""
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in zf.infolist():
        name = info.filename
        if name in members:
            raise _fail(f"member '{name}'", "appears twice in the plan file")
        if name != PLAN_JSON and not (name.endswith(".npy") and DATA_MEMBER.fullmatch(name[:-4])):
            raise _fail(f"member {name!r}", f"is not a plan member (expected {PLAN_JSON} and data_N.npy)")
        if info.flag_bits & 0x1:
            raise _fail(f"member '{name}'", "is encrypted")
        members[name] = info
        total += info.file_size
    if PLAN_JSON not in members:
        raise _fail("", f"the file has no {PLAN_JSON}")
    if members[PLAN_JSON].file_size > MAX_PLAN_JSON_BYTES:
        raise _fail(f"member '{PLAN_JSON}'", f"inflates to {members[PLAN_JSON].file_size} bytes "
                    f"(at most {MAX_PLAN_JSON_BYTES})")
    if total > max_bytes:
        raise _fail("", f"members inflate to {total} bytes, over the cap of {max_bytes} "
                    "(load_plan(..., max_bytes=) raises it)")
    return members


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A member's bytes, never more than `limit` (zipfile stops at the declared size and checks
    the CRC, so a member that inflates past its header is a BadZipFile, not a 4 GiB string)."""
    if info.file_size > limit:
        raise _fail(f"member '{info.filename}'", f"inflates to {info.file_size} bytes, more than the "
                    f"{limit} its tensor needs")
    with zf.open(info) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise _fail(f"member '{info.filename}'", f"inflates past {limit} bytes")
    return data


def data_limits(doc: dict, members: dict[str, zipfile.ZipInfo]) -> dict[str, int]:
    """{data ref: most bytes its member may hold}; the members must be exactly these refs."""
    limits: dict[str, int] = {}
    for i, t in enumerate(doc["tensors"]):
        ref = t["data"]
        if ref is None:
            continue
        where = f"tensors[{i}].data"
        if ref in limits:
            raise _fail(where, f"'{ref}' is named by two tensors")
        if f"{ref}.npy" not in members:
            raise _fail(where, f"names member '{ref}.npy', which the plan file does not hold")
        shape = [int(d) for d in t["shape"]]  # check_document made sure these are ints
        itemsize = dtypes.from_name(t["dtype"]).numpy.itemsize
        limits[ref] = int(np.prod(shape, dtype=object)) * itemsize + _NPY_HEADER_SLACK
    extra = sorted(set(members) - {PLAN_JSON} - {f"{ref}.npy" for ref in limits})
    if extra:
        raise _fail(f"member '{extra[0]}'", "is not named by any tensor")
    return limits
