"""IrGraph: stable ids, the tensor side table, edits, traversal, copies and cycle errors."""

from __future__ import annotations

import numpy as np
import pytest

from onyxia.errors import ModelLoadError
from onyxia.ir import dtypes
from onyxia.ir.graph import IrGraph, TensorDef, TensorKind


def chain_graph() -> IrGraph:
    """x -> Relu(a) -> Neg(b) -> Sqrt(c) -> y, plus a weight w added by Add."""
    g = IrGraph("chain")
    g.add_tensor(TensorDef("x", dtypes.FLOAT32, (2,), TensorKind.INPUT))
    g.add_tensor(TensorDef("w", dtypes.FLOAT32, (2,), TensorKind.WEIGHT, np.ones(2, np.float32)))
    g.inputs.append("x")
    g.add_node("Relu", ["x"], ["a"], name="relu")
    g.add_node("Neg", ["a"], ["b"], name="neg")
    g.add_node("Add", ["b", "w"], ["c"], name="add")
    g.add_node("Sqrt", ["c"], ["y"], name="sqrt")
    g.outputs.append("y")
    return g


def by_name(g: IrGraph, name: str) -> int:
    return next(n.id for n in g.nodes if n.name == name)


def test_node_ids_are_stable_and_never_reused_after_removal():
    g = chain_graph()
    ids = {n.name: n.id for n in g.nodes}
    assert sorted(ids.values()) == [0, 1, 2, 3]
    g.remove_node(ids["neg"])
    # The other nodes keep their ids and are still found by them.
    for name in ("relu", "add", "sqrt"):
        assert g.node(ids[name]).name == name
    new = g.add_node("Neg", ["a"], ["b"], name="neg2")
    assert new not in ids.values(), "a removed node's id must never be handed out again"
    assert g.node(new).name == "neg2"
    assert len(g) == 4


def test_tensor_side_table_tracks_outputs_and_keeps_valued_tensors():
    g = chain_graph()
    assert set(g.tensors) == {"x", "w", "a", "b", "c", "y"}
    assert g.tensor("a").kind is TensorKind.INTERMEDIATE and g.tensor("a").dtype is None
    assert g.tensor("w").value is not None and g.tensor("w").is_symbolic_value is False
    with pytest.raises(KeyError, match="nope"):
        g.tensor("nope")
    with pytest.raises(ValueError, match="already exists"):
        g.add_tensor(TensorDef("x"))
    # Removing Relu: 'a' is still read by Neg, so it stays in the table.
    g.remove_node(by_name(g, "relu"))
    assert "a" in g.tensors
    # Removing Add, then Neg: 'b' then has no consumer and no value, so it is dropped; the
    # weight 'w' (valued) and the graph output 'y' always stay.
    g.remove_node(by_name(g, "add"))
    assert "b" in g.tensors and "c" in g.tensors  # Neg still produces b, Sqrt reads c
    g.remove_node(by_name(g, "neg"))
    assert "b" not in g.tensors
    g.remove_node(by_name(g, "sqrt"))
    assert "y" in g.tensors and "w" in g.tensors
    assert g.fresh_name("a") == "a_1" and g.fresh_name("brand_new") == "brand_new"


def test_multi_output_nodes_link_each_output():
    g = IrGraph()
    g.add_tensor(TensorDef("x", dtypes.FLOAT32, (4,), TensorKind.INPUT))
    g.inputs.append("x")
    split = g.add_node("Split", ["x"], ["p", "q"], {"axis": 0}, name="split")
    ra = g.add_node("Relu", ["p"], ["rp"])
    rb = g.add_node("Relu", ["q"], ["rq"])
    cat = g.add_node("Concat", ["rq", "rp"], ["y"], {"axis": 0})
    g.outputs.append("y")
    assert g.producer("p") == split and g.producer("q") == split
    assert g.consumers("p") == [ra] and g.consumers("q") == [rb]
    assert g.topological_order()[0] == split and g.topological_order()[-1] == cat
    assert g.ancestors(cat) == {split, ra, rb}
    with pytest.raises(ModelLoadError, match="produced twice"):
        g.add_node("Neg", ["x"], ["q"], name="dup")


def test_absent_optional_inputs_are_none_and_not_linked():
    g = IrGraph()
    g.add_tensor(TensorDef("x", dtypes.FLOAT32, (4,), TensorKind.INPUT))
    g.inputs.append("x")
    nid = g.add_node("Clip", ["x", None, "hi"], ["y"], name="clip")
    g.add_tensor(TensorDef("hi", dtypes.FLOAT32, (), TensorKind.WEIGHT, np.float32(1)))
    g.outputs.append("y")
    assert g.node(nid).inputs == ["x", None, "hi"]
    assert None not in g.tensors
    assert g.consumers("hi") == [nid]
    g.validate()  # None is absent, never "a tensor nothing produces"


def test_topological_order_is_deterministic_and_ties_follow_node_ids():
    def build(order):
        g = IrGraph()
        g.add_tensor(TensorDef("x", dtypes.FLOAT32, (2,), TensorKind.INPUT))
        g.inputs.append("x")
        ids = {}
        for name in order:
            ids[name] = g.add_node("Relu", ["x"], [f"o_{name}"], name=name)
        g.add_node("Concat", [f"o_{n}" for n in sorted(order)], ["y"], {"axis": 0}, name="cat")
        g.outputs.append("y")
        return g, ids

    g, ids = build(["c", "a", "b"])
    first = g.topological_order()
    assert first == g.topological_order() == g.copy().topological_order()
    # Independent branches come in node-id (model) order, not name or hash order.
    assert [g.node(n).name for n in first] == ["c", "a", "b", "cat"]
    # A consumer added before its producer (ids out of dependency order) still sorts after it.
    g2 = IrGraph()
    g2.add_tensor(TensorDef("x", dtypes.FLOAT32, (2,), TensorKind.INPUT))
    late_consumer = g2.add_node("Neg", ["t"], ["y"], name="consumer")
    producer = g2.add_node("Relu", ["x"], ["t"], name="producer")
    assert g2.topological_order() == [producer, late_consumer]


def test_replace_node_keeps_id_and_outputs_and_relinks_inputs():
    g = chain_graph()
    nid = by_name(g, "neg")
    g.replace_node(nid, "Mul", ["a", "w"], {"note": 1})
    node = g.node(nid)
    assert (node.op_type, node.inputs, node.outputs, node.attributes) == ("Mul", ["a", "w"], ["b"], {"note": 1})
    assert nid in g.consumers("w") and nid in g.consumers("a")
    assert g.producer("b") == nid
    g.replace_node(nid, "Relu", ["x"])
    assert nid not in g.consumers("a") and nid not in g.consumers("w")
    assert g.consumers("x") == sorted([by_name(g, "relu"), nid])
    assert g.ancestors(by_name(g, "sqrt")) == {nid, by_name(g, "add")}


def test_replace_all_uses_rewires_consumers_and_graph_outputs():
    g = chain_graph()
    relu, neg, add, sqrt = (by_name(g, n) for n in ("relu", "neg", "add", "sqrt"))
    g.replace_all_uses("b", "a")  # skip Neg
    assert g.node(add).inputs == ["a", "w"]
    assert g.consumers("b") == [] and sorted(g.consumers("a")) == sorted([neg, add])
    assert neg not in g.live_nodes()
    assert g.ancestors(sqrt) == {relu, add}
    g.replace_all_uses("y", "c")
    assert g.outputs == ["c"]


def test_consumers_and_producer():
    g = chain_graph()
    assert g.producer("x") is None and g.producer("w") is None
    assert g.producer("y") == by_name(g, "sqrt")
    assert g.consumers("x") == [by_name(g, "relu")]
    assert g.consumers("y") == []
    assert g.consumers("never-seen") == []


def test_remove_node_unlinks_edges():
    g = chain_graph()
    add = by_name(g, "add")
    removed = g.remove_node(add)
    assert removed.op_type == "Add"
    assert add not in g.consumers("b") and add not in g.consumers("w")
    assert g.producer("c") is None
    assert add not in g.ancestors(by_name(g, "sqrt"))
    with pytest.raises(ModelLoadError, match="'c'"):
        g.validate()  # Sqrt now reads a tensor nothing produces


def test_copy_is_independent_of_the_original():
    g = chain_graph()
    g.tensor("a").shape = (2,)
    dup = g.copy()
    dup.remove_node(by_name(dup, "neg"))
    dup.add_node("Relu", ["y"], ["z"], name="extra")
    dup.tensor("a").shape = (99,)
    dup.node(by_name(dup, "relu")).attributes["alpha"] = 1.0
    dup.inputs.append("w")
    dup.opsets["com.microsoft"] = 1
    assert [n.name for n in g.nodes] == ["relu", "neg", "add", "sqrt"]
    assert g.tensor("a").shape == (2,)
    assert g.node(by_name(g, "relu")).attributes == {}
    assert g.inputs == ["x"] and "com.microsoft" not in g.opsets
    assert "z" not in g.tensors
    assert g.consumers("a") == [by_name(g, "neg")]
    # Values are shared (read-only data) but still present on both sides.
    assert g.tensor("w").value is not None and dup.tensor("w").value is not None
    np.testing.assert_array_equal(dup.tensor("w").value, g.tensor("w").value)
    # The next id of the copy continues after the original's, never colliding with it.
    assert dup.add_node("Relu", ["x"], ["k"]) == 5


def test_cycle_detection_names_the_nodes():
    g = IrGraph()
    g.add_tensor(TensorDef("x", dtypes.FLOAT32, (2,), TensorKind.INPUT))
    g.inputs.append("x")
    g.add_node("Add", ["x", "t2"], ["t1"], name="first_in_loop")
    g.add_node("Relu", ["t1"], ["t2"], name="second_in_loop")
    g.add_node("Neg", ["t1"], ["y"], name="outside")
    g.outputs.append("y")
    with pytest.raises(ModelLoadError) as info:
        g.topological_order()
    message = str(info.value)
    assert "cycle" in message and "first_in_loop" in message and "second_in_loop" in message
    assert "outside" not in message
    with pytest.raises(ModelLoadError, match="cycle"):
        g.validate()
