"""ONNX node conformance report: runs every onnx node test case on onyxia and explains each failure.

    python benchmarks/conformance_report.py                  # counts, families, seed subset, failure groups
    python benchmarks/conformance_report.py --write-ledger   # also rewrite tests/conformance/ledger.py
    python benchmarks/conformance_report.py -k 'softmax|gelu' --show-failures

Cases come from onnx's own BackendTest (the OnnxBackendNodeModelTest class, *_cpu methods) with
onyxia.backend, so a case passes here exactly when it passes under pytest. They run in worker
processes with a per-case timeout: a case that hangs or kills its process (a GPU hang, a native
crash) is recorded as such and the worker is replaced, so one bad case cannot stop the run.

Each failure gets one ledger reason. By-design limits are decided from the model (training-domain
ops, non-tensor values, graph inputs/outputs of a dtype with no GPU representation); the rest from
the exception: UnsupportedOperatorError -> "not implemented yet: <ops>", UnsupportedDtypeError ->
dtype, an assertion from onnx's comparison -> "wrong <values|shape|dtype>: <op>", other errors by
class and operator.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import multiprocessing as mp
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conformance_reasons beside this script

from conformance_reasons import DEVICE_DTYPES, reason  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LEDGER_PATH = REPO / "tests" / "conformance" / "ledger.py"
NODE_CLASS = "OnnxBackendNodeModelTest"

SEED_OPS = frozenset(
    "Add Sub Mul Div Pow Max Cos Sin Sqrt Neg Tanh Equal Greater Where Gelu Softmax MatMul Constant "
    "ConstantOfShape Shape Reshape Unsqueeze Transpose Concat Expand Gather Slice ScatterND Range Trilu "
    "ReduceSum ReduceMean Cast".split())
# Operator families for the per-family counts; a case belongs to the family of its principal op.
FAMILIES: dict[str, frozenset[str]] = {name: frozenset(ops.split()) for name, ops in {
    "binary elementwise": "Add Sub Mul Div Pow Max Min Mod Sum Mean PRelu BitShift BitwiseAnd BitwiseOr "
                          "BitwiseXor And Or Xor",
    "unary": "Abs Acos Acosh Asin Asinh Atan Atanh Ceil Celu Cos Cosh Elu Erf Exp Floor Gelu HardSigmoid "
             "HardSwish LeakyRelu Log Mish Neg Not BitwiseNot Reciprocal Relu Round Selu Shrink Sigmoid Sign "
             "Sin Sinh Softplus Softsign Sqrt Tan Tanh ThresholdedRelu Swish IsInf IsNaN Clip Cast CastLike",
    "comparison": "Equal Greater GreaterOrEqual Less LessOrEqual Where",
    "reduction": "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd "
                 "ReduceSum ReduceSumSquare ArgMax ArgMin CumSum CumProd",
    "shape/indexing": "Reshape Transpose Concat Expand Gather GatherElements GatherND Slice ScatterND "
                      "ScatterElements Scatter Range Trilu Shape Size Squeeze Unsqueeze Flatten Split Tile Pad "
                      "Identity ConstantOfShape Constant Compress OneHot NonZero DepthToSpace SpaceToDepth "
                      "EyeLike CenterCropPad ReverseSequence TensorScatter",
    "matmul": "MatMul Gemm MatMulInteger QLinearMatMul Einsum",
    "normalization": "BatchNormalization LayerNormalization InstanceNormalization GroupNormalization "
                     "LpNormalization MeanVarianceNormalization RMSNormalization LRN Softmax LogSoftmax Hardmax",
}.items()}
FAMILY_ORDER = [*FAMILIES, "other"]

# ---- what each case uses (static, from the model) --------------------------------------------

@dataclass
class CaseInfo:
    name: str  # onnx's case name, without the _cpu suffix
    ops: set[str]  # op types, "domain::Op" outside the default domain, subgraphs included
    domains: set[str]
    io_types: set[str]  # element types of graph inputs/outputs ("sequence" etc. for non-tensors)
    all_types: set[str]  # io types plus every inferred intermediate, initializer and constant
    principal: str = ""  # the op the case is about
    family: str = "other"

    @property
    def seed(self) -> bool:
        return self.ops <= SEED_OPS and self.all_types <= DEVICE_DTYPES


def _type_name(type_proto) -> str:
    import onnx

    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(type_proto, kind).elem_type
        if elem == 0:
            return "undefined"
        return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem != onnx.TensorProto.STRING else "string"
    return {"sequence_type": "sequence", "optional_type": "optional", "map_type": "map"}.get(kind, str(kind))


def _elem_name(elem: int) -> str:
    import onnx

    if elem == onnx.TensorProto.STRING:
        return "string"
    return onnx.helper.tensor_dtype_to_np_dtype(elem).name


def _walk_graph(graph, ops: set[str], domains: set[str], types: set[str]) -> None:
    import onnx

    for init in graph.initializer:
        types.add(_elem_name(init.data_type))
    for node in graph.node:
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        domains.add(domain)
        ops.add(f"{domain}::{node.op_type}" if domain else node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                types.add(_elem_name(attr.t.data_type))
            elif attr.type == onnx.AttributeProto.GRAPH:
                _walk_graph(attr.g, ops, domains, types)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _walk_graph(g, ops, domains, types)
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.WhichOneof("value"):
            types.add(_type_name(vi.type))


def case_info(name: str, model) -> CaseInfo:
    import onnx

    io_types = {_type_name(vi.type) for vi in (*model.graph.input, *model.graph.output) if vi.type.WhichOneof("value")}
    try:  # intermediate dtypes (Cast targets, ...) for the seed-subset figure
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - some node tests do not infer; use what the model declares
        inferred = model
    ops: set[str] = set()
    domains: set[str] = set()
    types: set[str] = set(io_types)
    _walk_graph(inferred.graph, ops, domains, types)
    types.discard("undefined")
    return CaseInfo(name, ops, domains, io_types, types)


def _snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op.split("::")[-1]).lower()


def assign_principal_ops(infos: dict[str, CaseInfo], models: dict[str, Any]) -> None:
    """Single-node cases are about their node; `X_expanded*` cases about X's op (the function it expands)."""
    single = {n: (m.graph.node[0].op_type if len(m.graph.node) == 1 else None) for n, m in models.items()}
    for name, info in infos.items():
        op = single[name]
        if op is None:
            base = re.sub(r"_expanded.*$", "", name)
            op = single.get(base)
        if op is None:  # longest op whose snake_case name prefixes the case name
            matches = [o for o in info.ops if name.startswith(f"test_{_snake(o)}")]
            op = max(matches, key=len) if matches else sorted(info.ops)[0] if info.ops else "?"
        info.principal = op
        info.family = next((f for f, members in FAMILIES.items() if op in members), "other")


# ---- running cases in worker processes ------------------------------------------------------

def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


# What numpy's assertions in onnx's assert_similar_outputs say (any other AssertionError is a bug).
_COMPARISON_MARKS = ("Not equal to tolerance", "incorrect shape", "Items are not equal")


def classify(exc: BaseException) -> dict[str, Any]:
    """What went wrong, from the exception alone (the parent adds what it knows from the model)."""
    from onyxia import errors

    if isinstance(exc, errors.UnsupportedOperatorError):
        ops = sorted(f"{d}::{o}" if d else o for d, o in exc.missing)
        return {"kind": "op", "key": ops, "detail": _first_line(exc)}
    if isinstance(exc, errors.UnsupportedDtypeError):
        m = re.search(r"(?:dtype|element type) (\w+)", str(exc))
        dtype = m.group(1).lower() if m else "?"
        return {"kind": "dtype", "key": {"double": "float64"}.get(dtype, dtype), "detail": _first_line(exc)}
    if isinstance(exc, errors.ModelLoadError):
        return {"kind": "load", "key": type(exc).__name__, "detail": _first_line(exc)}
    text = str(exc)
    if isinstance(exc, AssertionError) and any(m in text for m in _COMPARISON_MARKS):  # onnx's comparison
        key = ("shape" if "incorrect shape" in text else "dtype" if "dtype(" in text
               else "values" if "tolerance" in text else "output count")
        return {"kind": "mismatch", "key": key, "detail": " ".join(text.split())[:300]}
    if isinstance(exc, errors.OnyxiaError):
        return {"kind": "onyxia", "key": type(exc).__name__, "op": getattr(exc, "op_type", "") or "",
                "detail": _first_line(exc)}
    return {"kind": "crash", "key": type(exc).__name__, "detail": _first_line(exc),
            "where": traceback.format_tb(exc.__traceback__)[-1].strip().splitlines()[0] if exc.__traceback__ else ""}


def _load_node_cases():
    """onnx's BackendTest with onyxia's backend: the node category's TestCase class."""
    import warnings

    warnings.filterwarnings("ignore")  # onnx's case generators divide by zero on purpose
    import onnx.backend.test

    from onyxia.backend import OnyxiaBackend

    return onnx.backend.test.BackendTest(OnyxiaBackend, __name__).test_cases[NODE_CLASS]


def _worker(conn) -> None:
    """Run cases sent by name; answer (name, result dict, seconds) for each."""
    cases = _load_node_cases()
    conn.send(("ready", None, 0.0))
    while True:
        name = conn.recv()
        if name is None:
            return
        method = f"{name}_cpu"
        start = time.perf_counter()
        try:
            getattr(cases(method), method)()
            result: dict[str, Any] = {"kind": "pass"}
        except BaseException as exc:  # noqa: BLE001 - every failure is data here
            result = classify(exc)
        conn.send((name, result, time.perf_counter() - start))


class WorkerPool:
    """N worker processes; each case gets `timeout` seconds, after which its worker is replaced."""

    def __init__(self, jobs: int, timeout: float):
        self.jobs, self.timeout = jobs, timeout
        self.ctx = mp.get_context("spawn")  # never fork a process that may hold a wgpu device

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(300) or parent.recv()[0] != "ready":
            raise RuntimeError("a conformance worker did not start")
        return proc, parent

    def run(self, names: list[str], on_result) -> None:
        queue = collections.deque(names)
        lock = threading.Lock()

        def next_name() -> str | None:
            with lock:
                return queue.popleft() if queue else None

        def drive() -> None:
            proc, conn = self._start()
            while (name := next_name()) is not None:
                conn.send(name)
                start = time.perf_counter()
                if conn.poll(self.timeout):
                    try:
                        _, result, seconds = conn.recv()
                    except EOFError:  # the pipe closed: the worker died (a native crash, an abort)
                        proc.join(5)
                        result, seconds = {"kind": "died", "key": f"exit code {proc.exitcode}"}, 0.0
                else:
                    alive = proc.is_alive()
                    result = ({"kind": "timeout", "key": f"over {self.timeout:g} s"} if alive else
                              {"kind": "died", "key": f"exit code {proc.exitcode}"})
                    seconds = time.perf_counter() - start
                if result["kind"] in ("timeout", "died"):
                    proc.kill()
                    proc.join()
                    proc, conn = self._start()
                on_result(name, result, seconds)
            conn.send(None)
            proc.join(30)

        threads = [threading.Thread(target=drive) for _ in range(self.jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


# ---- reasons, report, ledger ----------------------------------------------------------------

def ledger_text(failures: dict[str, str], header: str) -> str:
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for name, why in failures.items():
        groups[why].append(name)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = [
        '"""The conformance ledger: ONNX node test cases onyxia does not pass yet, grouped by reason.',
        "",
        "tests/conformance/test_backend.py skips every case matched here with its reason; everything else",
        "must pass. Generated from a full run by `python benchmarks/conformance_report.py --write-ledger`;",
        "re-run it after adding an operator or fixing a bug (it lists entries that started passing).",
        "Entries are anchored, regex-escaped test names.",
        "",
        *header.splitlines(),
        '"""',
        "",
        "LEDGER: dict[str, list[str]] = {",
    ]
    for why, names in ordered:
        lines.append(f"    # {len(names)} case{'s' if len(names) != 1 else ''}")
        lines.append(f"    {why!r}: [")
        lines.extend(f'        r"^{re.escape(n)}_cpu$",' for n in sorted(names))
        lines.append("    ],")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _existing_ledger() -> dict[str, str]:
    """pattern -> reason from the current ledger file (empty if there is none)."""
    if not LEDGER_PATH.exists():
        return {}
    scope: dict[str, Any] = {}
    exec(compile(LEDGER_PATH.read_text(), str(LEDGER_PATH), "exec"), scope)  # noqa: S102 - our own file
    return {p: why for why, patterns in scope.get("LEDGER", {}).items() for p in patterns}


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case before it counts as a hang")
    parser.add_argument("-k", "--filter", default="", help="only cases whose name matches this regex")
    parser.add_argument("--write-ledger", action="store_true", help=f"rewrite {LEDGER_PATH.relative_to(REPO)}")
    parser.add_argument("--json", type=Path, help="also write every case's result as JSON here")
    parser.add_argument("--show-failures", action="store_true", help="print each failing case with its detail")
    parser.add_argument("--top", type=int, default=25, help="failure groups to print (default 25)")
    args = parser.parse_args(argv)
    if args.write_ledger and args.filter:
        parser.error("--write-ledger needs the full run (no -k)")
    if not os.environ.get("XDG_RUNTIME_DIR"):  # lavapipe warns on every device without one
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="onyxia-xdg-")

    import warnings

    warnings.filterwarnings("ignore")
    from onnx.backend.test.loader import load_model_tests

    models = {t.name: t.model for t in load_model_tests(kind="node")}
    infos = {n: case_info(n, m) for n, m in models.items()}
    assign_principal_ops(infos, models)
    names = sorted(n for n in models if re.search(args.filter, n))
    print(f"{len(models)} node cases in onnx {__import__('onnx').__version__}; running {len(names)} "
          f"with {args.jobs} workers, {args.timeout:g} s timeout", file=sys.stderr)

    results: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    def on_result(name: str, result: dict[str, Any], took: float) -> None:
        results[name], seconds[name] = result, took
        if len(results) % 100 == 0:
            print(f"  {len(results)}/{len(names)} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    WorkerPool(args.jobs, args.timeout).run(names, on_result)
    wall = time.perf_counter() - started

    passed = sorted(n for n in names if results[n]["kind"] == "pass")
    failures = {n: reason(infos[n], results[n]) for n in names if results[n]["kind"] != "pass"}
    from onyxia.runtime.device import select_adapter

    adapter = select_adapter().summary
    print(f"\nonyxia node conformance: {len(passed)}/{len(names)} pass ({_pct(len(passed), len(names))}) "
          f"on {adapter}; {wall:.0f} s with {args.jobs} workers")

    print("\nper family (principal op of the case):")
    for family in FAMILY_ORDER:
        members = [n for n in names if infos[n].family == family]
        ok = sum(results[n]["kind"] == "pass" for n in members)
        print(f"  {family:<20} {ok:>4}/{len(members):<4} {_pct(ok, len(members)):>6}")

    seed = [n for n in names if infos[n].seed]
    seed_ok = [n for n in seed if results[n]["kind"] == "pass"]
    print(f"\nseed subset (only seed ops, only device dtypes): {len(seed_ok)}/{len(seed)} pass "
          f"({_pct(len(seed_ok), len(seed))})")
    for n in sorted(set(seed) - set(seed_ok)):
        print(f"  FAIL {n}: {failures[n]}")

    groups = collections.Counter(failures.values())
    print(f"\n{len(failures)} failures in {len(groups)} ledger groups; the largest:")
    for why, count in groups.most_common(args.top):
        print(f"  {count:>4}  {why}")

    # Node tests feed shapes/axes/repeats as graph inputs; onyxia plans shapes at compile time, so
    # these need the value in the model (initializer, Constant, Shape chain) instead.
    needs_value = collections.Counter(why.split(":")[0] for why in failures.values() if "must be a constant" in why)
    if needs_value:
        print(f"\n{sum(needs_value.values())} failures need a compile-time value that the case feeds at run time: "
              + ", ".join(f"{op} {n}" for op, n in needs_value.most_common()))

    missing_ops: collections.Counter[str] = collections.Counter()
    alone: collections.Counter[str] = collections.Counter()
    for n in failures:
        if results[n]["kind"] == "op" and failures[n].startswith("not implemented yet"):
            missing_ops.update(results[n]["key"])
            if len(results[n]["key"]) == 1:
                alone[results[n]["key"][0]] += 1
    if missing_ops:
        print("\nmissing operators by cases blocked (cases that op alone would unblock):")
        for op, count in missing_ops.most_common(args.top):
            print(f"  {count:>4} ({alone[op]:>3})  {op}")

    old = _existing_ledger()
    if old:
        stale = [p for p in old if any(re.search(p, f"{n}_cpu") for n in passed)]
        print(f"\nledger: {len(old)} entries, {len(stale)} now pass"
              + (f" (e.g. {', '.join(stale[:5])})" if stale else ""))

    if args.show_failures:
        print("\nfailures:")
        for n, why in sorted(failures.items()):
            print(f"  {n}: {why}\n      {results[n].get('detail', '')}")

    if args.json:
        args.json.write_text(json.dumps({n: {**results[n], "seconds": round(seconds[n], 3),
                                             "reason": failures.get(n), "family": infos[n].family,
                                             "principal": infos[n].principal, "seed": infos[n].seed}
                                         for n in names}, indent=1, default=list))
    if args.write_ledger:
        stamp = datetime.date.today().isoformat()
        header = (f"Last run: {stamp}, onnx {__import__('onnx').__version__}, {adapter}: {len(passed)}/{len(names)} "
                  f"node cases pass;\nseed subset {len(seed_ok)}/{len(seed)}.")
        LEDGER_PATH.write_text(ledger_text(failures, header))
        print(f"\nwrote {LEDGER_PATH.relative_to(REPO)} ({len(failures)} entries, {len(groups)} reasons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
