"""Issue 12 root cause 4: a plan file is validated before anything trusts it.

Before: a `.onyxia` file could hang the runtime (a 2^31-workgroup grid), exhaust memory (a member
that inflates to gigabytes), silently run with a negative shader index, float workgroup counts
or weights of the wrong shape or dtype, carry duplicate `plan.json` members or `../` names, and
give IndexError/KeyError/OverflowError on edited structure. Each case edits a valid plan and
expects a PlanError naming the field (onyxia/plan/check.py).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from onyxia.errors import PlanError
from tests.builders.hostile import h, make_model, run_cli
from tests.builders.isolate import expect_error, expect_value

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def plan_model():
    return make_model([h.make_node("MatMul", ["x", "w"], ["m"], name="mm"), h.make_node("Relu", ["m"], ["y"])],
                      [("x", np.float32, ["n", 4])], ["y"], {"w": W})


def control_model():
    """A Loop with a fed trip count (ReadSymbol), a device condition and a scan output (LoopStep
    with slice copies, a data symbol), in front of an int64 Add (a shader that reports overflow)."""
    from onnx import TensorProto

    from tests.control_models import counting_loop

    model = counting_loop(m_input=True, while_limit=10.0)
    g = model.graph
    g.input.append(h.make_tensor_value_info("k", TensorProto.INT64, ["n"]))
    g.node.append(h.make_node("Add", ["k", "k"], ["k2"], name="add64"))
    g.output.append(h.make_tensor_value_info("k2", TensorProto.INT64, ["n"]))
    return model


def write_plan(path: Path, control: bool = False) -> tuple[dict, dict[str, bytes]]:
    """A valid plan at `path` (of control_model() if `control`, else plan_model()); returns its
    plan.json and its other members."""
    import onyxia
    from onyxia.compiler import CompilerPipeline
    from onyxia.compiler.passes import default_optimization_passes

    model = control_model() if control else plan_model()
    # The edits below index into this plan's shaders, tensors and steps: MatMul writing `m`, then
    # a Relu kernel, so the Relu stays out of the product's epilogue here.
    pipeline = CompilerPipeline(onyxia.core_operator_registry(), optimize=False)
    for p in default_optimization_passes():
        if p.name != "epilogue-fusion":
            pipeline.add_pass(p)
    pipeline.compile(onyxia.load_model(model), {"n": 2}).save(path)
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("plan.json")), {n: zf.read(n) for n in zf.namelist() if n != "plan.json"}


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=allow_pickle)
    return buf.getvalue()


def zip_members(path: Path, members: list[tuple[str, bytes]]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)


def all_steps(doc: dict) -> list[dict]:
    """Every step's JSON in the pre-order of plan.walk_steps (a Select's alternatives in order)."""
    flat: list[dict] = []

    def walk(steps: list[dict]) -> None:
        for s in steps:
            flat.append(s)
            walk([c for key in ("then", "orelse", "body") for c in s.get(key, [])])
            walk([c for alt in s.get("alternatives", []) for c in alt["steps"]])
    walk([s for op in doc["operations"] for s in op["steps"]])
    return flat


def first(doc: dict, t: str = "dispatch") -> dict:
    return next(s for s in all_steps(doc) if s["t"] == t)


def loop_step(doc: dict) -> dict:
    return first(doc, "loop")


def tensor_entry(doc: dict, name: str) -> dict:
    return next(t for t in doc["tensors"] if t["name"] == name)


def edit(doc: dict, members: dict[str, bytes], kind: str) -> list[tuple[str, bytes]] | None:
    """Apply one hostile edit; returns the members to write (None: plan.json + members)."""
    d = first(doc)
    if kind in CONTROL_CASES:
        edit_control(doc, kind)
    elif kind == "huge_grid":
        d["workgroups"] = [2**31, 1, 1]
    elif kind == "float_workgroups":
        d["workgroups"] = [2.5, 1, 1]
    elif kind == "negative_workgroups":
        d["workgroups"] = [-1, 1, 1]
    elif kind == "two_workgroup_counts":
        d["workgroups"] = [1, 1]
    elif kind == "negative_shader":
        d["shader"] = -1
    elif kind == "shader_out_of_range":
        d["shader"] = len(doc["shaders"])
    elif kind == "bool_shader":
        d["shader"] = True
    elif kind == "binding_to_nowhere":
        d["bindings"][0][0] = "ghost"
    elif kind == "missing_bindings":
        del d["bindings"]
    elif kind == "immediates_count":
        d["immediates"] = d["immediates"] + [1]
    elif kind == "unknown_step":
        d["t"] = "teleport"
    elif kind == "unknown_symbol":
        d["immediates"][0] = {"sym": "zz + 1"}
    elif kind == "hostile_expression":
        d["immediates"][0] = {"sym": "-" * 900 + "n"}
    elif kind == "binding_target_out_of_range":
        doc["symbolic_bindings"][0][1] = 10**6
    elif kind == "binding_kind_mismatch":
        doc["symbolic_bindings"][0][0] = "copy"
    elif kind == "binding_index_out_of_range":
        doc["symbolic_bindings"][0][2] = 99
    elif kind == "unknown_dtype":
        doc["tensors"][0]["dtype"] = "float128"
    elif kind == "float_shape":
        doc["tensors"][0]["shape"][1] = 4.0
    elif kind == "negative_weight_shape":
        doc["tensors"][2]["shape"] = [-4, -3]
    elif kind == "folded_negative_shape":  # issue 28: an expression folding to -4 raised TypeError
        doc["tensors"][2]["shape"][0] = {"sym": "0 - 4"}
    elif kind == "symbolic_negative_shape":  # n - 5 at the plan's n = 2; with two such extents the
        tensor_entry(doc, "m")["shape"] = [{"sym": "n - 5"}, {"sym": "n - 5"}]  # size was positive
    elif kind == "unknown_kind":
        doc["tensors"][0]["kind"] = "secret"
    elif kind == "duplicate_tensor":
        doc["tensors"].append(dict(doc["tensors"][0]))
    elif kind == "alias_cycle":
        doc["tensors"][0]["alias_of"] = doc["tensors"][1]["name"]
        doc["tensors"][1]["alias_of"] = doc["tensors"][0]["name"]
    elif kind == "output_unknown":
        doc["outputs"] = ["nothing"]
    elif kind == "missing_field":
        del doc["symbolic_bindings"]
    elif kind == "template_unknown":
        doc["shaders"][0]["template"] = "../../etc/passwd"
    elif kind == "param_type":
        doc["shaders"][0]["immediates"][0][1] = "f64"
    elif kind == "entry_point":
        doc["shaders"][0]["entry_point"] = "main() {}"
    elif kind == "dims_negative":
        doc["dims"]["n"] = -2
    elif kind in ("copy_misaligned", "copy_out_of_range"):  # a new last step: indices stay put
        size = 6 if kind == "copy_misaligned" else 4096
        doc["operations"].append({"name": "evil", "op_type": "Copy", "scratch": [], "steps": [
            {"t": "copy", "src": "x", "dst": "m", "size": size, "src_offset": 0, "dst_offset": 0}]})
    elif kind == "buffer_dtype":
        doc["shaders"][0]["buffers"][0][1] = "float16"
    elif kind == "buffer_no_device_dtype":
        doc["shaders"][0]["buffers"][0][1] = "string"
    elif kind == "buffer_flag_not_bool":
        doc["shaders"][0]["buffers"][0][2] = 1
    elif kind == "buffer_name_twice":
        doc["shaders"][0]["buffers"][1][0] = doc["shaders"][0]["buffers"][0][0]
    elif kind == "binding_access":
        d["bindings"][0][1] = False
    elif kind == "binding_extra":
        d["bindings"].append(["x", True])
    elif kind == "reports_not_bool":
        doc["shaders"][0]["reports"] = "yes"
    elif kind == "reports_without_status":
        doc["shaders"][0]["reports"] = True
    elif kind == "status_kind_forged":
        doc["tensors"][0]["kind"] = "status"
    elif kind == "sites_without_status":
        doc["sites"] = [["mm", "MatMul", "int64 overflow"]]
    elif kind == "site_malformed":
        doc["sites"] = [["mm", 2]]
    elif kind == "missing_sites":
        del doc["sites"]
    elif kind == "weight_wrong_shape":
        members["data_0.npy"] = npy(W.reshape(3, 4))
    elif kind == "weight_wrong_dtype":
        members["data_0.npy"] = npy(W.astype(np.float64))
    elif kind == "pickled_weight":
        members["data_0.npy"] = npy(np.array([{"a": 1}] * 12, dtype=object).reshape(4, 3), allow_pickle=True)
    elif kind == "weight_inflates":
        members["data_0.npy"] = npy(np.zeros(16 << 20, np.float32))  # 64 MiB for a 48-byte tensor
    elif kind == "missing_weight":
        del members["data_0.npy"]
    elif kind == "extra_member":
        members["data_7.npy"] = npy(W)
    elif kind == "dotdot_member":
        members["../evil.npy"] = npy(W)
    elif kind == "directory_member":
        members["sub/data_0.npy"] = npy(W)
    elif kind == "duplicate_plan_json":
        evil = dict(doc, outputs=[])
        return [("plan.json", json.dumps(doc).encode()), ("plan.json", json.dumps(evil).encode()),
                *members.items()]
    elif kind == "not_json":
        return [("plan.json", b"{not json"), *members.items()]
    elif kind == "json_list":
        return [("plan.json", b"[]"), *members.items()]
    else:
        raise AssertionError(kind)
    return None


def edit_control(doc: dict, kind: str) -> None:
    """Edits of control_model()'s plan: steps nested in a loop, data symbols, the status word."""
    loop = loop_step(doc)
    inner = loop["body"][0]
    if kind == "nested_binding_to_nowhere":
        inner["bindings"][0][0] = "ghost"
    elif kind == "nested_shader_out_of_range":
        inner["shader"] = 99
    elif kind == "nested_unknown_step":
        inner["t"] = "teleport"
    elif kind == "nested_huge_grid":
        inner["workgroups"] = [2**31, 1, 1]
    elif kind == "nested_binding_target":  # a copy binding aimed at the loop's first body step
        doc["symbolic_bindings"].append(["copy", doc_flat_index(doc, inner), 0, "n"])
    elif kind == "loop_counter_unknown":
        loop["counter"] = "ghost"
    elif kind == "loop_sets_caller_dim":
        loop["iterations"] = "n"
    elif kind == "read_symbol_sets_caller_dim":
        first(doc, "read_symbol")["symbol"] = "n"
    elif kind == "slice_copy_out_of_range":
        loop["leave"][0][3] = 4096  # src_offset
    elif kind == "slice_stride_misaligned":
        loop["leave"][0][6] = 6  # dst_stride
    elif kind == "data_symbol_unknown":
        doc["data_symbols"]["ghost"] = None
    elif kind == "status_bound_elsewhere":
        reporting = next(i for i, sh in enumerate(doc["shaders"]) if sh["reports"])
        step = next(s for s in all_steps(doc) if s["t"] == "dispatch" and s["shader"] == reporting)
        step["bindings"][-1][0] = step["bindings"][-2][0]
    elif kind == "status_shape":
        tensor_entry(doc, "onyxia/status")["shape"] = [1 << 20]
    else:
        raise AssertionError(kind)


def doc_flat_index(doc: dict, target: dict) -> int:
    """`target`'s index in the pre-order of every step (plan.walk_steps)."""
    return next(i for i, s in enumerate(all_steps(doc)) if s is target)


def load_edited(tmp: str, kind: str) -> None:
    from onyxia.plan import CompiledModel

    path = Path(tmp) / "p.onyxia"
    doc, members = write_plan(path, control=kind in CONTROL_CASES)
    written = edit(doc, members, kind)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names
        zip_members(path, written if written is not None else [("plan.json", json.dumps(doc).encode()),
                                                                *members.items()])
    CompiledModel.load(path)


# The plan's first dispatch: the MatMul is a Select (its kernel variants), whose first
# alternative's first step this is.
FIRST = r"operations\[0\]\.steps\[0\]\.alternatives\[0\]\.steps\[0\]"
CASES = {
    "huge_grid": r"step 1 workgroups: \[2147483648, 1, 1\] launch 2147483648 workgroups",
    "float_workgroups": FIRST + r" workgroups\[0\]: must be an integer",
    "negative_workgroups": r"step 1 workgroups\[0\]: is -1",
    "two_workgroup_counts": FIRST + r"\.workgroups: must hold 3 counts",
    "negative_shader": FIRST + r"\.shader: must be an index in \[0, 5\), got -1",
    "shader_out_of_range": FIRST + r"\.shader: must be an index in \[0, 5\), got 5",
    "bool_shader": FIRST + r"\.shader: must be an index",
    "binding_to_nowhere": FIRST + r"\.bindings\[0\]\[0\]: names tensor 'ghost'",
    "missing_bindings": r"operations\[0\]\.steps\[0\]: not a valid 'select' step: field 'bindings' is missing",
    "immediates_count": FIRST + r"\.immediates: holds 3 values; shader 0 takes 2",
    "unknown_step": r"operations\[0\]\.steps\[0\]: .*unknown step kind 'teleport'",
    "unknown_symbol": r"uses symbol 'zz'",
    "hostile_expression": r"dimension expression .* nested more than",
    "binding_target_out_of_range": r"symbolic_bindings\[0\]\[1\]: must be an integer in \[0, 7\)",
    "binding_kind_mismatch": r"symbolic_bindings\[0\]\[0\]: a binding of kind 'copy' cannot target step 0",
    "binding_index_out_of_range": r"symbolic_bindings\[0\]\[2\]: must be an integer in \[0, 8\), got 99",
    "unknown_dtype": r"tensors\[0\]\.dtype: unknown dtype 'float128'",
    "float_shape": r"tensors\[0\]\.shape\[1\]: must be an integer or a dimension expression, got 4\.0",
    "negative_weight_shape": r"tensors\[2\]\.shape\[0\]: must be non-negative, got -4",
    "folded_negative_shape": r"tensors\[2\]\.shape\[0\]: must be non-negative, got -4 \(tensor 'w'\)",
    "symbolic_negative_shape": r"tensor 'm' shape\[0\]: is -3 at the plan's dims \{'n': 2\}",
    "unknown_kind": r"tensors\[0\]\.kind: must be one of",
    "duplicate_tensor": r"tensors\[4\]\.name: 'x' is empty or names a second tensor",
    "alias_cycle": r"tensors\[0\]\.alias_of: aliases form a cycle",
    "output_unknown": r"outputs\[0\]: names tensor 'nothing'",
    "missing_field": r"symbolic_bindings: is missing",
    "template_unknown": r"shaders\[0\]\.template: names template '\.\./\.\./etc/passwd'",
    "param_type": r"shaders\[0\]\.immediates\[0\]\[1\]: must be one of \['f32', 'i32', 'u32'\], got 'f64'",
    "entry_point": r"shaders\[0\]\.entry_point: must be an identifier",
    "dims_negative": r"dims\.n: must be an integer >= 0, got -2",
    "copy_misaligned": r"step 7 copy: size 6 and offsets 0, 0 must be multiples of 4",
    "copy_out_of_range": r"step 7 copy: bytes 0\.\.4096 of tensor 'x', which has 32",
    "weight_wrong_shape": r"tensor 'w' data: is float32\[3, 4\], its TensorInfo says float32\[4, 3\]",
    "weight_wrong_dtype": r"member 'data_0\.npy': inflates to \d+ bytes, more than|tensor 'w' data: is float64",
    "pickled_weight": r"(Object arrays cannot be loaded|inflates to)",
    "weight_inflates": r"member 'data_0\.npy': inflates to 67108992 bytes, more than the 65584 its tensor needs",
    "missing_weight": r"tensors\[2\]\.data: names member 'data_0\.npy', which the plan file does not hold",
    "extra_member": r"member 'data_7\.npy': is not named by any tensor",
    "dotdot_member": r"member '\.\./evil\.npy': is not a plan member",
    "directory_member": r"member 'sub/data_0\.npy': is not a plan member",
    "duplicate_plan_json": r"member 'plan\.json': appears twice",
    "not_json": r"cannot read plan .*JSONDecodeError",
    "json_list": r"is not an onyxia plan",
    "buffer_dtype": FIRST + r"\.bindings\[0\]\[0\]: tensor 'x' \(float32\) cannot bind to "
                    r"shader 0's buffer 'a' \(float16\)",
    "buffer_no_device_dtype": r"shaders\[0\]\.buffers\[0\]\[1\]: .*has dtype string, which has no GPU",
    "buffer_flag_not_bool": r"shaders\[0\]\.buffers\[0\]: must be \[name, dtype, read_only",
    "buffer_name_twice": r"shaders\[0\]\.buffers\[1\]\[0\]: 'a' names a second buffer",
    "binding_access": FIRST + r"\.bindings\[0\]\[1\]: must be true",
    "binding_extra": FIRST + r"\.bindings: holds 4 tensors; shader 0 binds 3",
    "reports_not_bool": r"shaders\[0\]\.reports: must be true/false, got 'yes'",
    "reports_without_status": FIRST + r"\.bindings: holds 3 tensors; shader 0 binds 4",
    "status_kind_forged": r"tensors\[0\]\.kind: only tensor 'onyxia/status' is the status word",
    "sites_without_status": r"sites: the plan has report sites but no status tensor",
    "site_malformed": r"sites\[0\]: must be \[node, op type, what it detects\]",
    "missing_sites": r"^plan .*: sites: is missing",
}

# Edits of control_model()'s plan (operations[0] is the Loop: a ReadSymbol, a copy, the LoopStep).
CONTROL_CASES = {
    "nested_binding_to_nowhere": r"operations\[0\]\.steps\[2\]\.body\[0\]\.bindings\[0\]\[0\]: names tensor 'ghost'",
    "nested_shader_out_of_range": r"operations\[0\]\.steps\[2\]\.body\[0\]\.shader: must be an index in \[0, \d+\), "
                                  r"got 99",
    "nested_unknown_step": r"operations\[0\]\.steps\[2\]: not a valid 'loop' step: unknown step kind 'teleport'",
    "nested_huge_grid": r"step 3 workgroups: \[2147483648, 1, 1\] launch 2147483648 workgroups",
    "nested_binding_target": r"symbolic_bindings\[\d\]\[0\]: a binding of kind 'copy' cannot target step 3, "
                             r"which has \['immediate', 'workgroups'\]",
    "loop_counter_unknown": r"operations\[0\]\.steps\[2\] \(tensor\): names tensor 'ghost'",
    "loop_sets_caller_dim": r"operations\[0\]\.steps\[2\]\.iterations: 'n' is not one of the plan's data symbols",
    "read_symbol_sets_caller_dim": r"operations\[0\]\.steps\[0\]\.symbol: 'n' is not one of the plan's data symbols",
    "slice_copy_out_of_range": r"step 2 slice copy 0: bytes 4096\.\.4108 of tensor 'sc', which has 12",
    "slice_stride_misaligned": r"step 2 slice copy 0: strides 0, 6 must be multiples of 4",
    "data_symbol_unknown": r"data_symbols\.ghost: is not one of the plan's dynamic dims",
    "status_bound_elsewhere": r"bindings\[\d\]\[0\]: tensor '.*' \((int64|float32)\) cannot bind to shader \d+'s "
                              r"buffer 'the status word'",
    "status_shape": r"tensors\[\d+\]: the status word must be one uint32 of its own",
}
CASES.update(CONTROL_CASES)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_edited_plan_is_refused_naming_the_field(tmp_path, kind):
    expect_error(load_edited, str(tmp_path), kind, error=PlanError, match=CASES[kind])


def load_capped(tmp: str) -> None:
    from onyxia.plan import CompiledModel

    path = Path(tmp) / "p.onyxia"
    write_plan(path)
    CompiledModel.load(path, max_bytes=1000)


def test_decompressed_size_cap(tmp_path):
    expect_error(load_capped, str(tmp_path), error=PlanError,
                 match=r"members inflate to \d+ bytes, over the cap of 1000")


def header_claims_gigabytes(tmp: str) -> None:
    """A data member whose zip headers claim 3.75 GiB: refused before a byte is inflated."""
    from onyxia.plan import CompiledModel

    path = Path(tmp) / "p.onyxia"
    write_plan(path)
    raw = bytearray(path.read_bytes())
    name = b"data_0.npy"
    for signature, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = 0
        while (at := raw.find(signature, start)) >= 0:
            name_len = struct.unpack_from("<H", raw, at + (26 if signature == b"PK\x03\x04" else 28))[0]
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if raw[name_at:name_at + name_len] == name:
                struct.pack_into("<I", raw, at + size_at, 0xF0000000)
            start = at + 4
    path.write_bytes(bytes(raw))
    CompiledModel.load(path)


def test_member_claiming_gigabytes_is_refused_unread(tmp_path):
    expect_error(header_claims_gigabytes, str(tmp_path), error=PlanError,
                 match=r"member 'data_0\.npy': inflates to 4026531840 bytes", timeout=30)


def valid_plan_round_trip(tmp: str) -> None:
    """The untouched plan loads and computes what onnxruntime does."""
    import onyxia
    from onyxia.plan import CompiledModel
    from tests.builders.hostile import reference

    path = Path(tmp) / "p.onyxia"
    write_plan(path)
    exe = onyxia.Runtime().load_model(CompiledModel.load(path))
    for n in (2, 5, 1):
        exe.update_dimensions({"n": n})
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], reference(plan_model(), {"x": x})[0], rtol=1e-5,
                                   atol=1e-6)


def test_valid_plan_still_loads_and_runs(tmp_path):
    expect_value(valid_plan_round_trip, str(tmp_path))


def valid_control_plan_round_trip(tmp: str) -> None:
    """control_model()'s plan (nested steps, data symbols, a reporting shader) loads and computes
    what onnxruntime does; its int64 overflow is still reported after the round trip."""
    import onyxia
    from onyxia.errors import ComputeError
    from onyxia.plan import CompiledModel
    from tests.builders.hostile import reference

    path = Path(tmp) / "p.onyxia"
    write_plan(path, control=True)
    exe = onyxia.Runtime().load_model(CompiledModel.load(path))
    rng = np.random.default_rng(0)
    for n, trips in ((2, 3), (4, 7)):
        exe.update_dimensions({"n": n})
        feeds = {"x": rng.standard_normal(3).astype(np.float32), "a0": rng.standard_normal(3).astype(np.float32),
                 "M": np.array(trips, np.int64), "k": rng.integers(-1000, 1000, n).astype(np.int64)}
        got = exe.run(feeds)
        for name, want in zip(("af", "scan", "k2"), reference(control_model(), feeds)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    feeds["k"] = np.full(4, 2**31 - 1, np.int64)
    try:
        exe.run(feeds)
    except ComputeError as exc:
        assert "add64" in str(exc), exc
    else:
        raise AssertionError("the int64 overflow was not reported")


def test_valid_control_plan_still_loads_and_runs(tmp_path):
    expect_value(valid_control_plan_round_trip, str(tmp_path))


def cli_runs_edited_plan(tmp: str) -> tuple[int, str, str]:
    path = Path(tmp) / "p.onyxia"
    doc, members = write_plan(path)
    edit(doc, members, "huge_grid")
    zip_members(path, [("plan.json", json.dumps(doc).encode()), *members.items()])
    return run_cli(["run", str(path)])


def test_cli_reports_an_edited_plan_in_one_line(tmp_path):
    code, _out, err = expect_value(cli_runs_edited_plan, str(tmp_path))
    assert code == 1 and err.count("\n") == 1 and err.startswith("onyxia: error: plan ")
    assert "workgroups" in err
