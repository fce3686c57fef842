"""The plan cache: compiled plans kept on disk, so a second process skips the compiler.

A plan is stored in onyxia's own plan format (plan/model.py save_plan/load_plan) under
`<cache root>/plans/<key>.onyxia`, next to the tuning cache (runtime/tuner.py default_cache_dir:
ONYXIA_CACHE_DIR, else $XDG_CACHE_HOME/onyxia, else ~/.cache/onyxia). The key digests what the
plan depends on:

1. the model's content: the ONNX file's bytes and those of every external data file it names;
2. the dims the compiler was given (exact values) and which symbols are static;
3. the compiler: its passes (names, in order) and options, and the specialization the session
   made (input values or sizes baked into the graph);
4. onyxia itself: its version, PLAN_VERSION and a fingerprint of its source and shader files
   (size and mtime of each), so that an edited checkout never replays an older compiler's plan.

The adapter is not part of it: plans are adapter-neutral (a Select chooses kernels at replay).
Entries are written atomically (a temporary file renamed over the entry) and read tolerantly:
a missing, corrupt, foreign (another key's) or old-format file is a miss, and the compile that
follows rewrites it; never an error. Only plans compiled with the core operators are cached (a
user's operators are code the key cannot see). `ONYXIA_PLAN_CACHE=0` turns the cache off, as
does `plan_cache=False` (InferenceSession) or `--no-cache` (`onyxia run`, `onyxia bench`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import onnx
from onnx.external_data_helper import _get_all_tensors

from onyxia.paths import resolve_inside
from onyxia.plan import PLAN_VERSION, CompiledModel
from onyxia.runtime.tuner import default_cache_dir

_OFF = ("0", "false", "no", "off")
_KEY = "plan_cache_key"  # the metadata entry holding the entry's own key (a foreign file misses)
_CHUNK = 1 << 22
# Entries being written on a thread (PlanCache.put_later), by path: a get() of one waits for it.
_WRITES: dict[Path, threading.Thread] = {}
_WRITES_LOCK = threading.Lock()


def enabled_by_env() -> bool:
    """ONYXIA_PLAN_CACHE: on unless 0/false/no/off."""
    return os.environ.get("ONYXIA_PLAN_CACHE", "1").strip().lower() not in _OFF


def _hash_file(h: Any, path: Path) -> None:
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)


def model_digest(source: Any) -> str | None:
    """A digest of a model's content (a path or bytes; external data included), or None for a
    source the cache does not key (a ModelProto or IrGraph: hashing them costs a serialization)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        # external data of bytes: no folder to read
        return hashlib.sha256(data).hexdigest() if b"location" not in data else None
    if not isinstance(source, (str, os.PathLike)):
        return None
    found = _file_digest(Path(source))
    return found[0] if found else None


def _file_digest(path: Path) -> tuple[str, list[str]] | None:
    """(digest, the external data files it names) of the model file at `path`, or None."""
    h = hashlib.sha256()
    try:
        data = path.read_bytes()
    except OSError:
        return None
    h.update(data)
    # External data entries carry the key "location": a file without the word has none, and
    # parsing it again to find out would cost as much as the load.
    names: list[str] = []
    if b"location" in data:
        try:
            names = sorted(_external_files(path))
            for name in names:
                h.update(name.encode())
                _hash_file(h, resolve_inside(path.parent, name, "external data"))
        except Exception:  # noqa: BLE001 - a bad file or name: the load reports it; nothing to cache
            return None
    return h.hexdigest(), names


def _stat_key(path: Path) -> list[int] | None:
    """What says a file is unchanged since it was hashed: size, mtime, ctime and inode."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


# A file changed less than this long before it was hashed is not remembered by its stat: file
# times tick coarsely (a few ms), so a rewrite within the same tick, same size, would keep them
# (git's "racy" entries, the same rule).
_SETTLED_S = 2.0


def _settled(stat: list[int] | None, now_ns: int) -> bool:
    return stat is not None and now_ns - max(stat[1], stat[2]) > _SETTLED_S * 1e9


def _external_files(path: Path) -> set[str]:
    proto = onnx.load(str(path), load_external_data=False)
    return {e.value for t in _get_all_tensors(proto) for e in t.external_data if e.key == "location"}


def onyxia_version() -> str:
    # The package's __init__ imports the session, which imports this module: read the version
    # off the (by then imported) package instead of importing it back.
    return str(getattr(sys.modules.get("onyxia"), "__version__", "unknown"))


def source_fingerprint() -> str:
    """onyxia's version, the plan format's and (size, mtime) of every source and shader file."""
    h = hashlib.sha256(f"{onyxia_version()}/{PLAN_VERSION}".encode())
    package = Path(__file__).parent
    roots = [package, package.parent / "shaders", package / "shaders"]
    for root in roots:
        if not root.is_dir():
            continue
        for file in sorted(root.rglob("*")):
            if file.suffix in (".py", ".wgsl") and file.is_file():
                st = file.stat()
                h.update(f"{file.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


_FINGERPRINT: str | None = None


def _fingerprint() -> str:
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = source_fingerprint()
    return _FINGERPRINT


def plan_key(digest: str, dims: Mapping[str, int], static: Iterable[str], compiler: Iterable[str],
             specialization: Any = ()) -> str:
    """The cache key of a plan: model digest, dims given, static symbols, the compiler's passes
    and options, the session's specialization (repr of plain values) and onyxia's fingerprint."""
    doc = {"model": digest, "dims": sorted((str(k), int(v)) for k, v in dims.items()),
           "static": sorted(set(static)), "compiler": list(compiler), "specialization": repr(specialization),
           "onyxia": _fingerprint()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:40]


_DIGESTS = "digests.json"  # PlanCache.digest's memo, beside the plans
_MAX_DIGESTS = 256  # entries it keeps (the most recent)


class PlanCache:
    """Plans by key under `root` (default: `default_cache_dir() / "plans"`)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir() / "plans"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.onyxia"

    def digest(self, source: Any) -> str | None:
        """model_digest(source), remembered for a model file by its path and its own and its
        external data files' size, mtime, ctime and inode (`digests.json` under the root): a
        second process skips reading and hashing the bytes while none of them changed (a 92 MB
        XLM-R: 0.14 s of a 0.33 s cache lookup; an LLM's gigabytes take seconds). Files changed
        within _SETTLED_S of the hashing are hashed again next time."""
        if not isinstance(source, (str, os.PathLike)):
            return model_digest(source)
        path = Path(source).resolve()
        memo = self._digests()
        entry = memo.get(str(path))
        if isinstance(entry, dict) and entry.get("stat") == _stat_key(path) and isinstance(entry.get("digest"), str):
            external = entry.get("external")
            if isinstance(external, dict) and all(
                    _stat_key(path.parent / name) == stat for name, stat in external.items()):
                return entry["digest"]
        now = time.time_ns()
        stat = _stat_key(path)
        found = _file_digest(path)
        if found is None:
            return None
        digest, names = found
        external = {name: _stat_key(resolve_inside(path.parent, name, "external data")) for name in names}
        if _settled(stat, now) and all(_settled(v, now) for v in external.values()) and stat == _stat_key(path):
            memo.pop(str(path), None)
            memo[str(path)] = {"stat": stat, "external": external, "digest": digest}
            self._write_digests(dict(list(memo.items())[-_MAX_DIGESTS:]))
        return digest

    def _digests(self) -> dict[str, Any]:
        try:
            doc = json.loads((self.root / _DIGESTS).read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _write_digests(self, memo: dict[str, Any]) -> None:
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".digests.", suffix=".tmp", dir=self.root)
            with os.fdopen(fd, "w") as fh:
                json.dump(memo, fh)
            os.replace(tmp, self.root / _DIGESTS)
        except OSError:  # a read-only cache only costs the next process the hashing
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def get(self, key: str) -> CompiledModel | None:
        """The plan stored under `key`, or None (missing, unreadable, another key's, old)."""
        path = self.path(key)
        wait_for_write(path)
        if not path.is_file():
            return None
        try:
            model = CompiledModel.load(path, trusted=True)  # its own file: no schema checks again
        except Exception:  # noqa: BLE001 - any damage is a miss; the compile rewrites the entry
            return None
        if model.metadata.get(_KEY) != key:
            return None
        metadata = {k: v for k, v in model.metadata.items() if k != _KEY}
        return replace(model, metadata=metadata)

    def put_later(self, key: str, model: CompiledModel) -> None:
        """`put` on a thread, off the caller's way to a first result (a session's cold load:
        25-470 ms of the bench models' loads, most of it writing the weights). Not a daemon: the
        interpreter's exit waits for the entry; a get() of the same key in this process waits too."""
        path = self.path(key)
        with _WRITES_LOCK:
            earlier = _WRITES.pop(path, None)
        if earlier is not None:
            earlier.join()
        thread = threading.Thread(target=self.put, args=(key, model), name="onyxia-plan-cache-write")
        with _WRITES_LOCK:
            _WRITES[path] = thread
            thread.start()

    def put(self, key: str, model: CompiledModel) -> Path | None:
        """Store `model` under `key` (atomically); None where the cache cannot be written."""
        path = self.path(key)
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.root)
            os.close(fd)
            replace(model, metadata={**model.metadata, _KEY: key}).save(tmp)
            os.replace(tmp, path)
            return path
        except Exception:  # noqa: BLE001 - a read-only or full disk only costs the next process a compile
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return None


def wait_for_write(path: Path | None = None) -> None:
    """Wait until the entry at `path` (every entry, with None) being written by put_later is."""
    with _WRITES_LOCK:
        threads = [t for p, t in _WRITES.items() if path is None or p == path]
    for thread in threads:
        thread.join()
    with _WRITES_LOCK:
        for p, t in list(_WRITES.items()):
            if not t.is_alive():
                del _WRITES[p]


__all__ = ["PlanCache", "enabled_by_env", "model_digest", "plan_key", "source_fingerprint", "wait_for_write"]
