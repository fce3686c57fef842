"""Buffer reuse across disjoint lifetimes must never change results."""

import numpy as np
from onnx import helper as h

from tests.helpers import compile_model, make_model, run_ort


def _chain(n, view_output=False):
    # MatMuls between the elementwise ops keep fusion from merging the chain into one dispatch:
    # every step needs its own intermediate buffer, which the memory plan then shares.
    nodes, prev = [], "x"
    for i in range(n):
        op = ["Add", "MatMul", "Relu"][i % 3]
        nodes.append(h.make_node(op, [prev] if op == "Relu" else [prev, "c" if op == "Add" else "w"], [f"t{i}"]))
        prev = f"t{i}"
    # A diamond: t_last and t1 both feed the end, so t1 must stay alive across the chain.
    nodes.append(h.make_node("Add", [prev, "t1"], ["sum"]))
    if view_output:
        nodes.append(h.make_node("Reshape", ["sum", "flat"], ["y"]))
    else:
        nodes.append(h.make_node("Neg", ["sum"], ["y"]))
    inits = {"c": np.linspace(-1, 1, 4).astype(np.float32), "flat": np.array([-1], np.int64),
             "w": (np.random.default_rng(7).standard_normal((4, 4)) / 2).astype(np.float32)}
    return make_model(nodes, [("x", np.float32, ["seq", 4])], ["y"], inits)


def test_shared_buffers_keep_results(runtime):
    model = _chain(12)
    compiled = compile_model(model, {"seq": 6})
    assert compiled.metadata["memory"]["shared"] > 0, "the chain should reuse buffers"
    exe = runtime.load_model(compiled)
    for seq in (6, 3, 9):
        exe.update_dimensions({"seq": seq})
        x = np.random.default_rng(seq).standard_normal((seq, 4)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_output_viewing_an_intermediate_is_not_overwritten(runtime):
    model = _chain(9, view_output=True)
    compiled = compile_model(model, {"seq": 5})
    sum_root = compiled.tensors["y"].alias_of
    owners = {t.alias_of for t in compiled.tensors.values() if t.alias_of}
    assert sum_root is not None
    # nothing else may borrow the buffer the output lives in
    assert all(t.alias_of != sum_root or t.name in ("y", "sum") for t in compiled.tensors.values()), owners
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    exe = runtime.load_model(compiled)
    np.testing.assert_allclose(exe.run({"x": x})["y"], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
