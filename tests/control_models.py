"""Small If / Loop / Scan models built with onnx.helper, shared by the unit and GPU tests."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h

from tests.helpers import make_model


def vi(name: str, elem: int = TP.FLOAT, shape=None):
    return h.make_tensor_value_info(name, elem, shape)


def if_model(cond_constant: bool | None = None, *, shape=(3,)):
    """o = x + y if s > 0 else x * y (both branches read the outer x, y); with `cond_constant` the
    condition is an initializer instead."""
    then = h.make_graph([h.make_node("Add", ["x", "y"], ["t"])], "then", [], [vi("t")])
    orelse = h.make_graph([h.make_node("Mul", ["x", "y"], ["e"]), h.make_node("Neg", ["e"], ["ne"])], "else", [],
                          [vi("ne")])
    nodes = [h.make_node("If", ["c"], ["o"], then_branch=then, else_branch=orelse, name="choose")]
    inputs = [("x", np.float32, shape), ("y", np.float32, shape)]
    inits = {}
    if cond_constant is None:
        nodes.insert(0, h.make_node("Greater", ["s", "zero"], ["c"]))
        inputs.append(("s", np.float32, [1]))
        inits["zero"] = np.zeros(1, np.float32)
    else:
        inits["c"] = np.array(cond_constant)
    return make_model(nodes, inputs, ["o"], inits)


def arms_differ_model(device_cond: bool = False):
    """y = concat(x, x) [2n] if cond else sum(x) [1]; z = 2 * y and shape(y) after the If.

    The condition is a graph input, or with `device_cond` computed on the device (sum(x) > 0)."""
    then = h.make_graph([h.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [vi("t", TP.FLOAT, None)])
    orelse = h.make_graph([h.make_node("ReduceSum", ["x"], ["e"], keepdims=1)], "else", [],
                          [vi("e", TP.FLOAT, None)])
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=orelse, name="pick"),
             h.make_node("Mul", ["y", "two"], ["z"]), h.make_node("Shape", ["y"], ["n"])]
    inputs = [("x", np.float32, ["n"])]
    if device_cond:
        nodes.insert(0, h.make_node("ReduceSum", ["x"], ["s"], keepdims=0))
        nodes.insert(1, h.make_node("Greater", ["s", "zero"], ["c"]))
    else:
        inputs.append(("c", np.bool_, []))
    return make_model(nodes, inputs, ["y", "z", "n"], {"two": np.array(2, np.float32),
                                                       "zero": np.array(0, np.float32)})


def counting_loop(*, m_input: bool = False, m: int = 5, while_limit: float | None = None):
    """acc_{i+1} = acc_i + i (as float), scan out acc_{i+1} * x. With `while_limit` the body's
    condition is acc < limit (computed on the device); with `m_input` M is a graph input."""
    nodes = [h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT), h.make_node("Add", ["acc", "fi"], ["acc2"]),
             h.make_node("Mul", ["acc2", "x"], ["sc"])]
    inits = {}
    if while_limit is None:
        nodes.append(h.make_node("Identity", ["cin"], ["cout"]))
    else:
        nodes += [h.make_node("ReduceSum", ["acc2"], ["total"], keepdims=0),
                  h.make_node("Less", ["total", "limit"], ["cout"])]
        inits["limit"] = np.array(while_limit, np.float32)
    body = h.make_graph(nodes, "body", [vi("i", TP.INT64, []), vi("cin", TP.BOOL, []), vi("acc", TP.FLOAT, [3])],
                        [vi("cout", TP.BOOL, []), vi("acc2", TP.FLOAT, [3]), vi("sc", TP.FLOAT, [3])])
    inputs = [("x", np.float32, [3]), ("a0", np.float32, [3])]
    if m_input:
        inputs.append(("M", np.int64, []))
    else:
        inits["M"] = np.array(m, np.int64)
    return make_model([h.make_node("Loop", ["M", "", "a0"], ["af", "scan"], body=body, name="count")],
                      inputs, ["af", "scan"], inits)


def fibonacci_loop(m: int = 6):
    """(a, b) <- (b, a + b): a carried value that is another one's input (the copies stage it)."""
    body = h.make_graph([h.make_node("Identity", ["b"], ["a2"]), h.make_node("Add", ["a", "b"], ["b2"]),
                         h.make_node("Identity", ["cin"], ["cout"])], "fib",
                        [vi("i", TP.INT64, []), vi("cin", TP.BOOL, []), vi("a", TP.FLOAT, [2]), vi("b", TP.FLOAT, [2])],
                        [vi("cout", TP.BOOL, []), vi("a2", TP.FLOAT, [2]), vi("b2", TP.FLOAT, [2])])
    return make_model([h.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b"], body=body)],
                      [("a0", np.float32, [2]), ("b0", np.float32, [2])], ["a", "b"], {"M": np.array(m, np.int64)})


def scan_model(length="t", *, in_axis: int = 0, reverse: int = 0, out_axis: int = 0, out_reverse: int = 0):
    """Two states (running sum, running max) over x [.., t, ..] scanned along `in_axis`, scan
    outputs sum * w and the state max, stacked along `out_axis`."""
    body = h.make_graph([h.make_node("Add", ["s", "xi"], ["s2"]), h.make_node("Max", ["mx", "xi"], ["mx2"]),
                         h.make_node("Mul", ["s2", "w"], ["out"])], "scan_body",
                        [vi("s", shape=[4]), vi("mx", shape=[4]), vi("xi", shape=[4])],
                        [vi("s2", shape=[4]), vi("mx2", shape=[4]), vi("out", shape=[4]), vi("mx2_copy", shape=[4])])
    body.node.append(h.make_node("Identity", ["mx2"], ["mx2_copy"]))
    x_shape = [length, 4] if in_axis == 0 else [4, length]
    node = h.make_node("Scan", ["s0", "m0", "x"], ["s", "m", "ys", "ms"], body=body, num_scan_inputs=1,
                       scan_input_axes=[in_axis], scan_input_directions=[reverse],
                       scan_output_axes=[out_axis, out_axis], scan_output_directions=[out_reverse, 0])
    return make_model([node], [("s0", np.float32, [4]), ("m0", np.float32, [4]), ("x", np.float32, x_shape)],
                      ["s", "m", "ys", "ms"], {"w": np.array([1, -1, 2, 0.5], np.float32)})
