"""Every Conv kernel alternative (the register-tiled ones of operators/conv/cpu.py and the
workgroup-tiled ones) against onnxruntime, on both adapter kinds; symbolic dims changed without
recompiling, long reductions (past lavapipe's ~65,535 loop iterations), the fused epilogue."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper as h

import onyxia
from onyxia.compiler import CompilerPipeline
from onyxia.operators import core_operator_registry
from onyxia.operators.elementwise.fused import FUSED_DOMAIN
from onyxia.plan import AdapterFacts
from onyxia.runtime.select import SelectCommand
from onyxia.runtime.tuner import TuneSettings
from tests.builders.conv import conv_model, randn
from tests.helpers import compile_model, live_dispatches, make_model, run_ort


def _shape(shape, dims):
    return [dims[d] if isinstance(d, str) else d for d in shape]


def check_every_alternative(runtime, model, x_shape, dims_list, tol=2e-4, compiled=None, codes=None):
    """Each dims in turn (one compile), each adapter kind, each eligible alternative of each
    conv Select: the output matches onnxruntime's. Returns the labels that ran; `codes` (a
    list) receives the WGSL of each register-tiled kernel (conv_register, depthwise_rows) that ran."""
    compiled = compiled or compile_model(model, dims_list[0])
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
    kernel = next(list(i.dims[2:]) for i in model.graph.initializer if i.name == "w")
    static_pointwise = all(isinstance(d, int) for d in x_shape) and kernel == [1, 1] and np.prod(x_shape[2:]) % 4 == 0
    ran = set()
    for dims in dims_list:
        x = randn(*_shape(x_shape, dims))
        ref = run_ort(model, {"x": x})[0]
        exe.update_dimensions({k: v for k, v in dims.items()})
        for kind in ("cpu", "gpu"):
            exe.assume_adapter(kind)
            selects = [c for c in exe.commands if isinstance(c, SelectCommand) and c.tuned
                       and c.step.key.startswith("conv/")]
            assert selects, [c.step.key for c in exe.commands if isinstance(c, SelectCommand)]
            for c in selects:
                for i, label in enumerate(c.step.labels):
                    if not c.eligible[i]:
                        continue
                    exe.choose(c, i)
                    got = exe.run({"x": x})["y"]
                    if label == "workgroup" and kind == "cpu" and static_pointwise:
                        assert {exe.model.shaders[d.shader].label for d in exe.dispatch_commands()
                                if all(d.workgroups)} == {"matmul/gemv_chunked"}, label
                    if codes is not None:
                        codes += [exe._render(d.shader)[0][0] for d in exe.dispatch_commands()
                                  if exe.model.shaders[d.shader].label in ("conv/conv_register", "conv/depthwise_rows")]
                    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol, err_msg=f"{kind} {label} {dims}")
                    ran.add(label)
    assert exe.stats.recompiles == 0
    return ran


# (x shape, w shape, attributes, dims): every variant of the register kernel
CASES = {
    # pointwise, P = h * w symbolic and not a multiple of 4, batch 2 (then 1, other sizes)
    "pointwise": ([["n", 12, "h", "w"], [20, 12, 1, 1], {},
                   [dict(n=2, h=5, w=3), dict(n=1, h=7, w=9), dict(n=2, h=3, w=4)]]),
    # static positions, a multiple of 4: "workgroup" is the matrix product with the k-major
    # weights as A^T, on a CPU-type adapter the chunked (M <= 64) and register (M = 72) kernels
    "pointwise_static": ([[1, 12, 6, 6], [20, 12, 1, 1], {}, [{}]]),
    "pointwise_static_72": ([[2, 8, 4, 4], [72, 8, 1, 1], {}, [{}]]),
    # MG % 4: row-major W
    "pointwise_m6": ([["n", 8, "h", "w"], [6, 8, 1, 1], {}, [dict(n=2, h=3, w=3), dict(n=2, h=2, w=6)]]),
    "strided_dilated_asym": ([[2, 16, "h", "w"], [24, 16, 3, 3],
                              dict(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2]),
                              [dict(h=9, w=11), dict(h=12, w=7), dict(h=9, w=12)]]),
    "stem": ([[1, 3, "h", "w"], [16, 3, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2]),
              [dict(h=17, w=17), dict(h=15, w=16)]]),
    "groups": ([[1, 16, 8, 8], [32, 4, 3, 3], dict(group=4, pads=[1, 1, 1, 1]), [{}]]),
    "depthwise": ([[2, 8, "h", "w"], [8, 1, 5, 5], dict(group=8, pads=[2, 2, 2, 2], strides=[2, 2]),
                   [dict(h=9, w=10), dict(h=20, w=21), dict(h=9, w=16)]]),
    "depthwise_x2": ([[1, 4, 9, 8], [8, 1, 3, 3], dict(group=4), [{}]]),
    # the row-tile kernel (conv/depthwise_rows): dilated rows, strided columns, uneven pads,
    # heights that leave a partial tile of 4 and 2 rows, widths past one 8- and 16-wide segment
    "depthwise_dilated": ([["n", 6, "h", "w"], [6, 1, 3, 3],
                           dict(group=6, pads=[1, 2, 0, 1], strides=[1, 2], dilations=[2, 1]),
                           [dict(n=2, h=7, w=36), dict(n=1, h=10, w=20), dict(n=1, h=5, w=9)]]),
    "depthwise_7x7": ([[1, 4, "h", 24], [4, 1, 7, 7], dict(group=4, pads=[3, 3, 3, 3]),
                       [dict(h=9), dict(h=4)]]),
    # the row walker (conv/depthwise_walk) where rows are a multiple of 4 wide in and out: 1, 2
    # and 4 rows an invocation over heights that leave a partial block, 1 .. 10 steps a row;
    # stride 2 with 5 x 5 taps (two vec4s a step), dilation 2 with a leading pad of 3 (a window
    # starting a vec4 early); rows not a multiple of 4 wide take the other kernels
    "depthwise_walk": ([["n", 8, "h", "w"], [8, 1, 3, 3], dict(group=8, pads=[1, 1, 1, 1]),
                        [dict(n=2, h=9, w=16), dict(n=1, h=6, w=40), dict(n=1, h=3, w=4), dict(n=1, h=5, w=10)]]),
    "depthwise_walk_s2": ([[1, 8, "h", "w"], [8, 1, 5, 5], dict(group=8, pads=[2, 2, 2, 2], strides=[2, 2]),
                           [dict(h=17, w=32), dict(h=6, w=24)]]),
    "depthwise_walk_dilated": ([[1, 4, "h", "w"], [4, 1, 3, 3], dict(group=4, pads=[2, 3, 2, 1], dilations=[2, 2]),
                                [dict(h=7, w=16), dict(h=10, w=8)]]),
    "conv1d": ([[2, 8, "L"], [12, 8, 3], dict(pads=[1, 2], dilations=[2]), [dict(L=13), dict(L=32)]]),
    # kernel rows too long for the usual tiles (wav2vec2's positional conv: 128 taps, 16 groups):
    # the 4 x 4 tile (cpu.LONG_KERNEL_TILE), not the GPU-type kernels
    "long_kernel": ([["n", 32, "L"], [32, 2, 128], dict(group=16, pads=[64, 64]), [dict(n=1, L=48), dict(n=2, L=30)]]),
    # rows of 40 taps (past cpu.LONG_ROW_TAPS: a loop of 8-tap steps), strided and dilated, 3
    # maps a group (row-major weights), 6 channels (read one element at a time, or as aligned
    # vec4s: unrolled)
    "long_kernel_plain": ([["n", 6, "L"], [6, 3, 40], dict(group=2, pads=[20, 21], strides=[2], dilations=[2]),
                           [dict(n=1, L=57), dict(n=2, L=88)]]),
    "conv3d": ([[1, 4, 5, 6, 8], [8, 4, 3, 2, 3], dict(strides=[1, 2, 1], pads=[0, 1, 1, 1, 0, 1]), [{}]]),
    # static row widths, wide row segments (cpu.ROW_TILES): 56 -> 2 x 28 (batch and height
    # symbolic), 30 -> 28 + 2 (stride 2), 14 -> 16, depthwise 44 -> 2 x 28 (the last 16 idle)
    "fitted_rows": ([["n", 8, "h", 56], [12, 8, 3, 3], dict(pads=[1, 1, 1, 1]),
                     [dict(n=2, h=5), dict(n=1, h=3)]]),
    # 32 channel rows (cpu.ROW_TILES_2D): 40 maps, one full block and one of 8
    "rows_of_32": ([["n", 8, "h", "w"], [40, 8, 3, 3], dict(pads=[1, 1, 1, 1]),
                    [dict(n=2, h=5, w=12), dict(n=1, h=4, w=9)]]),
    # k-major weights in strips (cpu.kmajor_strip): 96 maps, three strips of 32; 2 groups of 24
    # maps, strips of 8, a 32-row tile's block spanning three of them
    "strips": ([[1, 4, "h", "w"], [96, 4, 3, 3], dict(pads=[1, 1, 1, 1], group=1), [dict(h=5, w=7)]]),
    "strips_grouped": ([[1, 8, "h", "w"], [48, 4, 3, 3], dict(pads=[1, 1, 1, 1], group=2), [dict(h=4, w=9)]]),
    "rows_of_32_strided": ([[1, 8, "h", "w"], [40, 8, 3, 3], dict(pads=[1, 0, 1, 1], strides=[2, 2]),
                            [dict(h=9, w=20), dict(h=6, w=11)]]),
    "fitted_odd_segments": ([[1, 8, 5, 60], [8, 8, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2]), [{}]]),
    "fitted_16": ([[1, 8, 3, 16], [8, 8, 3, 3], dict(pads=[1, 0, 1, 0]), [{}]]),
    "fitted_depthwise": ([[2, 8, 6, 44], [8, 1, 5, 5], dict(group=8, pads=[2, 2, 2, 2]), [{}]]),
    # windows that do not overlap and read no pad: also the patches' product (pointwise.py
    # plan_patch_product): strided 1x1 (ResNet's downsample), 1-D and 2-D; patch embeddings
    # (kernel = stride) over sizes that leave a remainder, 4 and 3 channels
    "strided_point": ([["n", 8, "h", "w"], [12, 8, 1, 1], dict(strides=[2, 2]),
                       [dict(n=2, h=9, w=11), dict(n=1, h=14, w=8)]]),
    "strided_point_1d": ([["n", 8, "L"], [12, 8, 1], dict(strides=[3]), [dict(n=2, L=13), dict(n=1, L=30)]]),
    # ... read out of the input by the product itself (window+product): output rows 11 and 20
    # wide (a lane's 4 positions across rows), 165 and 180 positions (row blocks past 32, the
    # last one partial), stride 2 x 3, 16 channels (4 k steps)
    "strided_point_wide": ([["n", 16, "h", "w"], [24, 16, 1, 1], dict(strides=[2, 3]),
                            [dict(n=2, h=30, w=32), dict(n=1, h=17, w=60)]]),
    "patches": ([["n", 4, "h", "w"], [16, 4, 4, 4], dict(strides=[4, 4]),
                 [dict(n=2, h=18, w=17), dict(n=1, h=8, w=12)]]),
    "patches_rgb": ([["n", 3, "h", "w"], [8, 3, 2, 2], dict(strides=[2, 2]),
                     [dict(n=1, h=8, w=9), dict(n=2, h=6, w=12)]]),
    # a video transformer's tubelet embedding (Conv3d, kernel = stride 2 x 4 x 4)
    "patches_3d": ([[1, 4, "d", 8, "w"], [8, 4, 2, 4, 4], dict(strides=[2, 4, 4]),
                    [dict(d=5, w=8), dict(d=4, w=13)]]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_conv_alternative_matches_ort(runtime, name):
    x_shape, w_shape, attrs, dims_list = CASES[name]
    codes: list[str] = []
    ran = check_every_alternative(runtime, conv_model("Conv", x_shape, w_shape, **attrs), x_shape, dims_list,
                                  codes=codes)
    maps_per_group = w_shape[0] // attrs.get("group", 1)
    if runtime.subgroup_size >= 8 and maps_per_group % 4 == 0 and attrs.get("group", 1) < w_shape[0]:
        # k-major weights (output channels a multiple of 4 per group; not depthwise), 1x1 kernels
        # included: the weights broadcast over the subgroup
        assert any("subgroupBroadcast" in code for code in codes), name
    assert "workgroup" in ran and any(label.startswith(("register/", "registerq/")) for label in ran), ran
    # rows of any width read as vec4s (picked out by offset) exactly where the input's element
    # count is a multiple of 4 (its channels are), else as aligned vec4s or one element at a time
    assert any(label.startswith("registerq/") for label in ran) == (x_shape[1] % 4 == 0), ran
    assert any(label.startswith("register/") for label in ran) == (x_shape[1] % 4 != 0), ran
    # channels not a multiple of 4: rows a multiple of 4 wide ran the aligned vec4-input variants
    # too (every case has such dims)
    assert any(label.startswith("register4/") for label in ran) == (x_shape[1] % 4 != 0), ran
    if name.startswith("pointwise"):  # the transposed product where C and M are multiples of 4
        assert ("product" in ran) == (w_shape[0] % 4 == 0 and w_shape[1] % 4 == 0), ran
    assert ("patches+product" in ran) == name.startswith(("strided_point", "patches")), ran
    # one tap over 1-D or 2-D maps: the positions read where they lie (no copy first)
    assert ("window+product" in ran) == name.startswith("strided_point"), ran
    # kernel rows past cpu.LONG_ROW_TAPS walk their taps in a loop (not where read as aligned vec4s)
    assert any("for (var t0" in code for code in codes) == name.startswith("long_kernel"), name
    if name.startswith(("depthwise", "fitted_depthwise")) and name != "depthwise_x2":  # one channel a group
        assert {label.split("/")[0] for label in ran} >= {"rows", "rows4"}, ran
    # the walker at every block height, exactly where some dims have rows a multiple of 4 wide
    walks = {"depthwise_walk", "depthwise_walk_s2", "depthwise_walk_dilated", "depthwise_7x7", "depthwise",
             "fitted_depthwise"}
    assert {label for label in ran if label.startswith("walk/")} == ({"walk/1", "walk/2", "walk/4"}
                                                                   if name in walks else set()), (name, ran)


def test_the_row_walker_is_bounded_by_construction(runtime):
    # conv/depthwise_walk walks 4 positions a loop step: its guard keeps an invocation's loop
    # trips ((steps + 2) x (1 + rows)) under lavapipe's ~65,535 (rows up to 4 x WALK_MAX_QUADS
    # wide), and asks rows a multiple of 4 wide in and out (vec4 loads and stores); at the bound
    # every block height matches onnxruntime
    from onyxia.operators.conv.depthwise import WALK_MAX_QUADS, WALK_ROWS

    assert (WALK_MAX_QUADS + 2) * (1 + max(WALK_ROWS)) < 65_535
    model = conv_model("Conv", [1, 4, 4, "w"], [4, 1, 3, 3], group=4, pads=[1, 1, 1, 1])
    ran = check_every_alternative(runtime, model, [1, 4, 4, "w"], [dict(w=4 * WALK_MAX_QUADS)])
    assert {label for label in ran if label.startswith("walk/")} == {f"walk/{rh}" for rh in WALK_ROWS}, ran
    select = next(s for op in compile_model(model, {"w": 64}).operations for s in op.steps
                  if getattr(s, "key", "").startswith("conv/"))
    for width, walks in ((64, True), (4 * WALK_MAX_QUADS, True), (4 * WALK_MAX_QUADS + 4, False), (66, False)):
        values = [v if isinstance(v, int) else v.evaluate({"w": width}) for v in select.values()]
        eligible, _ = select.evaluate(values, AdapterFacts("cpu"))
        assert [label for label, ok in zip(select.labels, eligible) if ok and label.startswith("walk/")] == (
            [f"walk/{rh}" for rh in WALK_ROWS] if walks else []), width


@pytest.fixture(scope="module")
def plain_runtime():
    """The same adapter with its subgroup operations unused: the register kernel's plain body."""
    from onyxia.runtime import Runtime

    return Runtime(subgroups=False)


@pytest.mark.parametrize("name", ["strided_dilated_asym", "stem", "groups", "fitted_rows", "conv3d",
                                  "strided_point_wide"])
def test_conv_alternatives_without_subgroups_match_ort(plain_runtime, name):
    x_shape, w_shape, attrs, dims_list = CASES[name]
    codes: list[str] = []
    ran = check_every_alternative(plain_runtime, conv_model("Conv", x_shape, w_shape, **attrs), x_shape, dims_list,
                                  codes=codes)
    assert any(label.startswith("register") for label in ran), ran
    assert codes and not any("subgroup" in code for code in codes)


def test_the_subgroup_size_is_probed(runtime):
    # lavapipe reports 4-128; a workgroup of 8 runs on one SIMD batch of its lanes (8 with AVX2)
    if "subgroup" in runtime.features and runtime.info.adapter_type == "CPU":
        assert runtime.subgroup_size in (4, 8, 16, 32, 64), runtime.subgroup_size
    else:
        assert runtime.subgroup_size == 0


def test_register_kernels_are_the_cpu_heuristic(runtime):
    model = conv_model("Conv", [1, 16, "h", "w"], [32, 16, 3, 3], pads=[1, 1, 1, 1])
    compiled = compile_model(model, {"h": 10, "w": 10})
    cpu = {compiled.shaders[d.shader].label for d in live_dispatches(compiled, {}, "cpu")}
    gpu = {compiled.shaders[d.shader].label for d in live_dispatches(compiled, {}, "gpu")}
    assert cpu == {"conv/conv_register"} and gpu == {"conv/conv_gemm"}, (cpu, gpu)


def test_long_reduction_is_split(runtime):
    # 24576 input channels: one invocation's channel loop alone would run past lavapipe's
    # ~65,535 iterations (3 loops of 24576); the register kernel splits it in 3 and adds up.
    model = conv_model("Conv", [1, 24576, "h", "w"], [4, 24576, 1, 1])
    compiled = compile_model(model, {"h": 2, "w": 3})
    labels = [compiled.shaders[d.shader].label for d in live_dispatches(compiled, {}, "cpu")]
    assert labels == ["conv/conv_register", "matmul/splitk"], labels
    ran = check_every_alternative(runtime, model, [1, 24576, "h", "w"], [dict(h=2, w=3)], tol=2e-3,
                                  compiled=compiled)
    assert any(label.startswith("registerq/") for label in ran)


def _conv_select(model, dims):
    return next(s for op in compile_model(model, dims).operations for s in op.steps
                if getattr(s, "key", "").startswith("conv/"))


@pytest.mark.parametrize("width", [None, 56, 14, 7])
def test_2d_rows_take_32_channel_rows(width):
    # 3x3 over 2-D rows: 32 channels x 8 positions (cpu.py ROW_TILES_2D) at any row width, static
    # or symbolic (the Select's prefer guards), vec4 input reads where the row allows them
    model = conv_model("Conv", [1, 32, 4, width or "w"], [32, 32, 3, 3], pads=[1, 1, 1, 1])
    select = _conv_select(model, {} if width else {"w": 56})
    for w in (56, 14, 7):
        if width in (None, w):
            dims = {"w": w} if width is None else {}
            label = "registerq/32x8"
            assert select.labels[select.choose(dims, AdapterFacts("cpu"))] == label, (w, select.labels)
            assert select.labels[select.choose(dims, AdapterFacts("gpu"))] == "workgroup"


def test_tile_preferences_by_kernel_and_rank():
    cpu = AdapterFacts("cpu")
    # rows of more than 4 taps keep 16 channel rows (a 32-row body of 7 taps compiles 3x slower)
    select = _conv_select(conv_model("Conv", [1, 3, "h", "w"], [64, 3, 7, 7], pads=[3] * 4, strides=[2, 2]),
                          {"h": 224, "w": 224})
    assert select.labels[select.choose({"h": 224, "w": 224}, cpu)] == "register4/16x8", select.labels
    # 1-D rows: 8 x 8, strided or not
    for strides, length in (([1], 1500), ([2], 3199)):
        select = _conv_select(conv_model("Conv", [1, 32, "L"], [32, 32, 3], pads=[1, 1], strides=strides),
                              {"L": length})
        assert select.labels[select.choose({"L": length}, cpu)].endswith("/8x8"), (strides, select.labels)
    # fewer output channels than 32: the tile's rows shrink to the next power of two
    select = _conv_select(conv_model("Conv", [1, 8, 6, "w"], [12, 8, 3, 3], pads=[1, 1, 1, 1]), {"w": 16})
    assert select.labels[select.choose({"w": 16}, cpu)] == "registerq/16x8", select.labels


def test_long_kernel_rows_take_the_last_resort_tile():
    # wav2vec2's positional conv (256 channels in 16 groups, 128 taps, 49 frames): no usual tile's
    # unrolled body fits, so the 4 x 4 one is offered and a CPU-type adapter takes it (the
    # workgroup kernel took 200 ms there on lavapipe, the tile 12 ms)
    model = conv_model("Conv", [1, 256, "L"], [256, 16, 128], group=16, pads=[64, 64])
    select = next(s for op in compile_model(model, {"L": 49}).operations for s in op.steps
                  if getattr(s, "key", "").startswith("conv/"))
    assert select.labels[select.choose({"L": 49}, AdapterFacts("cpu"))] == "registerq/4x4", select.labels
    assert select.labels[select.choose({"L": 48}, AdapterFacts("cpu"))] == "registerq/4x4", select.labels
    assert select.labels[select.choose({"L": 49}, AdapterFacts("gpu"))] == "workgroup"


def test_strided_2d_rows_take_32_channel_rows():
    # stride 2 over 2-D rows: 8-wide segments of 32 channels at any row width, rows read as vec4s
    # (lavapipe, 64 -> 128 from 55x55: 32x8 7.0 ms, 8x8 11.1)
    model = conv_model("Conv", [1, 32, 8, "w"], [32, 32, 3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    select = _conv_select(model, {"w": 56})
    assert select.labels[select.choose({"w": 56}, AdapterFacts("cpu"))] == "registerq/32x8", select.labels
    assert select.labels[select.choose({"w": 55}, AdapterFacts("cpu"))] == "registerq/32x8", select.labels


def test_long_reduction_fitted_rows(runtime):
    # 3x3 over 6000 input channels (18000 kernel rows, past lavapipe's ~65,535 loop iterations
    # with 3 loops a row) on a fitted 20-wide row segment: split in 3 and added up.
    model = conv_model("Conv", [1, 6000, 3, 20], [4, 6000, 3, 3], pads=[1, 1, 1, 1])
    compiled = compile_model(model, {})
    labels = [compiled.shaders[d.shader].label for d in live_dispatches(compiled, {}, "cpu")]
    assert labels == ["conv/conv_register", "matmul/splitk"], labels
    ran = check_every_alternative(runtime, model, [1, 6000, 3, 20], [{}], tol=2e-3, compiled=compiled)
    assert "registerq/4x28" in ran, ran


def _with_epilogue(model, exprs, inputs, extra_inputs=()):
    """The model's Conv node as the onyxia::ConvEpilogue carrying fused ops that
    passes/epilogue_fusion.py makes (the epilogue protocol of operators/matmul/epilogue.py),
    planned through plan_conv's epilogue parameter: every kernel alternative, not only the one
    the pass's own tests reach."""
    graph = onyxia.load_model(model)
    nid = next(n for n in graph.topological_order() if graph.node(n).op_type == "Conv")
    node = graph.node(nid)
    graph.replace_node(nid, "ConvEpilogue", list(node.inputs) + list(extra_inputs),
                       {**node.attributes, "epilogue_exprs": exprs, "epilogue_inputs": inputs}, domain=FUSED_DOMAIN)
    return graph


_EPILOGUE_CONVS = [([8, 4, 3, 3], dict(pads=[1, 1, 1, 1])), ([8, 4, 1, 1], {}),
                   ([4, 1, 3, 3], dict(group=4, pads=[1, 1, 1, 1]))]
_STRIDED_CONVS = [([8, 4, 1, 1], dict(strides=[2, 2])), ([8, 4, 2, 2], dict(strides=[2, 2]))]


@pytest.mark.parametrize("w_shape,attrs,operand",
                         [(*conv, operand) for conv in _EPILOGUE_CONVS for operand in ("full", "channel", "row")]
                         + [(*conv, "channel") for conv in _STRIDED_CONVS])
def test_fused_epilogue_relu_and_residual(runtime, w_shape, attrs, operand):
    # Conv + Add(operand) + Relu against onnxruntime's unfused graph; the operand is a residual
    # (the output's shape), a per-channel [M, 1, 1] or a row [w] broadcast to the output. The
    # strided convs (their patches' product among the alternatives), whose output is not
    # [h, w], take the per-channel one.
    maps = w_shape[0]
    r_shape = {"full": [2, maps, "h", "w"], "channel": [maps, 1, 1], "row": ["w"]}[operand]
    x_shape = [2, 4, "h", "w"]
    inits = {"w": randn(*w_shape), "b": randn(w_shape[0])}
    inputs = [("x", np.float32, x_shape), ("r", np.float32, r_shape)]
    ref_model = make_model([h.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), h.make_node("Add", ["c", "r"], ["s"]),
                            h.make_node("Relu", ["s"], ["y"])], inputs, ["y"], inits)
    conv_only = make_model([h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], inputs, ["y"], inits)
    graph = _with_epilogue(conv_only, ["x0 + x1", "max(v0, 0.0)"], [-1, 3], ["r"])
    compiled = CompilerPipeline(core_operator_registry()).compile(graph, {"h": 6, "w": 7}, ())
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
    ran = set()
    for dims in (dict(h=6, w=7), dict(h=5, w=8)):
        feeds = {"x": randn(2, 4, dims["h"], dims["w"]), "r": randn(*_shape(r_shape, dims))}
        ref = run_ort(ref_model, feeds)[0]
        exe.update_dimensions(dims)
        for kind in ("cpu", "gpu"):
            exe.assume_adapter(kind)
            select = next(c for c in exe.commands if isinstance(c, SelectCommand) and c.step.key.startswith("conv/"))
            for i, label in enumerate(select.step.labels):
                if select.eligible[i]:
                    exe.choose(select, i)
                    np.testing.assert_allclose(exe.run(feeds)["y"], ref, rtol=2e-4, atol=2e-4,
                                               err_msg=f"{kind} {label} {dims}")
                    ran.add(label)
    # the depthwise row walker applies the ops in its vec4 stores (8 wide rows)
    assert ("walk/2" in ran) == (attrs.get("group") == 4), ran


@pytest.mark.parametrize("k,attrs", [(3, dict(pads=[1, 1, 1, 1])), (1, dict(strides=[2, 2])),
                                     (2, dict(strides=[2, 2]))])
def test_float16_conv_on_every_alternative(runtime, k, attrs):
    # float16 storage, f32 compute: against onnxruntime in float32 on the same (rounded) values
    # (the strided 1x1 and 2x2 convs: their patches' product too, the patches copied as float16).
    x16, w16, b16 = randn(2, 8, 6, 8).astype(np.float16), randn(8, 8, k, k).astype(np.float16), \
        randn(8).astype(np.float16)
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    model = make_model([node], [("x", np.float16, [2, 8, "h", "w"])], ["y"], {"w": w16, "b": b16})
    ref_model = make_model([node], [("x", np.float32, [2, 8, "h", "w"])], ["y"],
                           {"w": w16.astype(np.float32), "b": b16.astype(np.float32)})
    ref = run_ort(ref_model, {"x": x16.astype(np.float32)})[0]
    compiled = compile_model(model, {"h": 6, "w": 8})
    exe = runtime.load_model(compiled, tuning=TuneSettings(enabled=False))
    for kind in ("cpu", "gpu"):
        exe.assume_adapter(kind)
        select = next(c for c in exe.commands if isinstance(c, SelectCommand) and c.step.key.startswith("conv/"))
        assert ("patches+product" in select.step.labels) == ("strides" in attrs), select.step.labels
        assert ("window+product" in select.step.labels) == (k == 1 and "strides" in attrs), select.step.labels
        for i, label in enumerate(select.step.labels):
            if select.eligible[i]:
                exe.choose(select, i)
                got = exe.run({"x": x16})["y"]
                assert got.dtype == np.float16
                np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-2, err_msg=f"{kind} {label}")


@pytest.mark.parametrize("width, label", [(56, "registerq/16x16"), (28, "registerq/16x16"), (14, "registerq/16x8")])
def test_strided_pointwise_rows_take_16_wide_segments(width, label):
    # ResNet's downsample: 1x1 stride 2, rows not flattened. The heuristic takes the product
    # reading the positions out of the input (pointwise.py plan_window_product), not the one over
    # a gathered copy (plan_patch_product); among the register tiles (the tuner's to time),
    # 16 positions a segment over output rows past 8 wide, 8 over 7 (cpu.py STRIDED_POINT_TILES),
    # static or symbolic width
    for static in (True, False):
        model = conv_model("Conv", [1, 64, 8, width if static else "w"], [128, 64, 1, 1], strides=[2, 2])
        dims = {} if static else {"w": width}
        select = next(s for op in compile_model(model, dims).operations for s in op.steps
                      if getattr(s, "key", "").startswith("conv/"))
        assert select.labels[select.choose(dims, AdapterFacts("cpu"))] == "window+product", select.labels
        assert select.labels[:2] == ("window+product", "patches+product"), select.labels
        tiles = dataclasses.replace(select, alternatives=select.alternatives[2:])
        assert tiles.labels[tiles.choose(dims, AdapterFacts("cpu"))] == label, (width, static, tiles.labels)
