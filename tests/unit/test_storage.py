"""Device storage of every dtype (ir/dtypes.py) and the binding generator (codegen/storage.py),
without a GPU: byte layouts against onnx's own raw serialization, sizes, generated declarations."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper as h
from onnx import numpy_helper

from onyxia.codegen.storage import buffer_code
from onyxia.ir import dtypes
from onyxia.ir.dim_parse import parse_dim
from onyxia.plan import BufferDecl
from tests.helpers import compile_model, make_model

DEVICE = [d for d in dtypes.all_dtypes() if d.on_device]


def sample(dtype: dtypes.DType, n: int = 13) -> np.ndarray:
    """`n` values covering the dtype's range (odd n: partial words and bytes)."""
    rng = np.random.default_rng(0)
    if dtype.is_bool:
        return rng.integers(0, 2, n).astype(bool)
    if dtype.is_float:
        return (rng.standard_normal(n) * 4).astype(np.float32).astype(dtype.numpy)
    info = ml_dtypes.iinfo(dtype.numpy) if dtype.bits < 8 else np.iinfo(dtype.numpy)
    lo, hi = max(int(info.min), -(2**31)), min(int(info.max), 2**31 - 1)
    return rng.integers(lo, hi, n, endpoint=True).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", DEVICE, ids=str)
def test_device_bytes_are_the_onnx_raw_bytes(dtype):
    """Below 32 bits a tensor's device bytes are its ONNX raw_data (packed for 4 and 2 bits),
    padded to a word: uploads and readbacks are byte copies."""
    values = sample(dtype)
    device = dtypes.to_device(values, dtype, "t")
    assert device.nbytes == dtype.nbytes(values.size) and device.nbytes % 4 == 0
    if dtype.packed:
        raw = numpy_helper.from_array(values).raw_data
        assert device.tobytes()[:len(raw)] == raw
    back = dtypes.from_device(device.tobytes(), dtype, values.size)
    assert back.dtype == dtype.numpy and np.array_equal(back.view(np.uint8), values.view(np.uint8))


@pytest.mark.parametrize("dtype", [dtypes.FLOAT32, dtypes.INT32, dtypes.FLOAT16], ids=str)
def test_contiguous_uploads_are_not_copied(dtype):
    """An array contiguous in its storage type already is uploaded as it is (a view); a strided
    one, or one whose bytes are not whole words, is converted."""
    values = sample(dtype, 8)
    assert np.shares_memory(dtypes.to_device(values, dtype, "t"), values)
    strided = sample(dtype, 16)[::2]
    device = dtypes.to_device(strided, dtype, "t")
    assert not np.shares_memory(device, strided)
    assert np.array_equal(dtypes.from_device(device.tobytes(), dtype, 8), strided)
    if dtype.bits == 16:  # 3 halves: padded to 8 bytes
        odd = dtypes.to_device(values[:3], dtype, "t")
        assert odd.nbytes == 8 and np.array_equal(dtypes.from_device(odd.tobytes(), dtype, 3), values[:3])


def test_sizes_are_expressions_padded_to_words():
    n = parse_dim("seq * 3")
    assert dtypes.FLOAT16.nbytes(5) == 12 and dtypes.FLOAT16.nbytes(n) == (n + 1) // 2 * 4
    assert dtypes.from_name("int4").nbytes(9) == 8 and dtypes.BOOL.nbytes(4) == 4
    assert dtypes.INT64.nbytes(3) == 12  # int64 is an i32 word on the device
    assert dtypes.from_name("float64").on_device is False


def test_int64_out_of_the_int32_range_is_refused_at_upload():
    with pytest.raises(Exception, match="int64 values must fit in int32"):
        dtypes.to_device(np.array([2**31], np.int64), dtypes.INT64, "x")


def test_generated_bindings():
    buffers = (BufferDecl("x", "float16", True, vector=True), BufferDecl("idx", "int64", True),
               BufferDecl("y", "int8", False), BufferDecl("z", "bfloat16", False, whole_words=True),
               BufferDecl("r", "float8e4m3fn", False, raw=True))
    native = buffer_code(buffers, native_f16=True, reports=False)
    packed = buffer_code(buffers, native_f16=False, reports=True)
    assert native.startswith("enable f16;") and "enable f16" not in packed
    assert "var<storage, read> x_buf: array<vec4<f16>>;" in native
    assert "var<storage, read> x_buf: array<vec2<u32>>;" in packed  # the same bytes, packed
    assert "@binding(1) var<storage, read> idx_buf: array<i32>;" in native
    # sub-word stores merge into their word atomically; whole-word kernels store plain words
    assert "var<storage, read_write> y_buf: array<atomic<u32>>;" in native and "atomicOr(&y_buf[w]" in native
    assert "var<storage, read_write> z_buf: array<u32>;" in native and "const z_lanes = 2u;" in native
    assert "alias r_t = u32;" in native and "fn onyxia_encode_e4m3fn(" in native
    assert "@binding(5) var<storage, read_write> onyxia_status" in packed and "onyxia_checked_add" in packed
    assert "onyxia_status" not in native


def test_wide_buffers_take_64_bit_loads_only_with_wide_reads():
    """`wide` read-only buffers: 64-bit element types where the device has shader-int64
    (`wide_reads`), the plain ones otherwise; NAME_load2 / NAME_word8 in both forms."""
    buffers = (BufferDecl("w", "float32", True, vector=True, wide=True), BufferDecl("s", "float32", True, wide=True),
               BufferDecl("h", "float16", True, vector=True, wide=True),
               BufferDecl("q", "uint8", True, vector=True, raw=True, wide=True),
               BufferDecl("o", "float32", False, wide=True))
    wide = buffer_code(buffers, native_f16=True, reports=False, packed_f16_reads=True, wide_reads=True)
    plain = buffer_code(buffers, native_f16=True, reports=False, packed_f16_reads=True)
    for decl in ("w_buf: array<vec2<u64>>", "s_buf: array<u64>", "h_buf: array<u64>", "q_buf: array<vec4<u64>>"):
        assert decl in wide
    for decl in ("w_buf: array<vec4<f32>>", "s_buf: array<f32>", "h_buf: array<vec2<u32>>", "q_buf: array<vec4<u32>>"):
        assert decl in plain
    assert "o_buf: array<f32>" in wide  # written buffers keep 32-bit words
    for code in (wide, plain):
        for fn in ("fn w_load4(", "fn w_load2(", "fn s_load2(", "fn h_load4(", "fn q_word8(", "fn q_word4("):
            assert fn in code


def test_shaders_differing_only_in_storage_are_distinct():
    """Two casts with one expression but other dtypes must not share a shader."""
    nodes = [h.make_node("Cast", ["x"], ["a"], to=1), h.make_node("Cast", ["a"], ["y"], to=10)]
    compiled = compile_model(make_model(nodes, [("x", np.float16, [4])], ["y"]))
    assert len({s.shader for s in compiled.steps}) == 2
    assert [tuple(b.dtype for b in s.buffers) for s in compiled.shaders] == [("float16", "float32"),
                                                                              ("float32", "float16")]


def test_status_word_is_read_with_the_outputs_and_names_the_node():
    """A kernel's report (here set by hand: the null backend runs no kernels) fails the run that
    reads outputs back, naming the node, and is cleared; a run reading nothing leaves it set."""
    from onyxia.errors import ComputeError
    from onyxia.plan import STATUS_ERROR, STATUS_TENSOR
    from onyxia.runtime.null import null_executor

    model = make_model([h.make_node("Add", ["a", "b"], ["y"], name="big_add")],
                       [("a", np.int64, [2]), ("b", np.int64, [2])], ["y"])
    compiled = compile_model(model)
    assert compiled.sites == (("big_add", "Add", "an int64 result is outside ±(2^31 - 1), the range the GPU "
                                                 "holds int64 in"),)
    assert compiled.tensors[STATUS_TENSOR].kind == "status"
    exe = null_executor(compiled)
    feeds = {"a": np.array([1, 2], np.int64), "b": np.array([3, 4], np.int64)}
    exe.run(feeds)
    status = exe.buffers[STATUS_TENSOR]
    status.data[:4] = (STATUS_ERROR | 1).to_bytes(4, "little")  # an error at site 1
    exe.run(feeds, outputs=[], device_outputs=["y"])  # nothing read back: no drain, the word stays
    with pytest.raises(ComputeError, match="node 'big_add' \\(Add\\): an int64 result"):
        exe.run(feeds)
    assert bytes(status.data[:4]) == bytes(4)
    exe.run(feeds)
    # A note (no top bit): site 1 lost an int64 value. Harmless unless an output holds one.
    status.data[:4] = (1).to_bytes(4, "little")
    exe.run(feeds)
    assert bytes(status.data[:4]) == bytes(4)


def test_plans_without_int64_arithmetic_have_no_status_word():
    from onyxia.plan import STATUS_TENSOR

    model = make_model([h.make_node("Add", ["a", "a"], ["y"])], [("a", np.int32, [2])], ["y"])
    compiled = compile_model(model)
    assert STATUS_TENSOR not in compiled.tensors and compiled.sites == ()


def test_plan_files_keep_buffers_and_report_sites(tmp_path):
    from onyxia.plan import CompiledModel

    nodes = [h.make_node("Cast", ["x"], ["f"], to=17, saturate=0), h.make_node("Cast", ["i"], ["j"], to=7)]
    model = make_model(nodes, [("x", np.float16, [5]), ("i", np.float32, [3])], ["f", "j"], opset=21)
    compiled = compile_model(model)
    compiled.save(tmp_path / "m.onyxia")
    loaded = CompiledModel.load(tmp_path / "m.onyxia")
    assert loaded.shaders == compiled.shaders and loaded.sites == compiled.sites
    assert any(b.raw for s in loaded.shaders for b in s.buffers)  # the non-saturating float8 cast
    assert loaded.tensors["f"].storage == "e4m3fn" and loaded.tensors["f"].nbytes == 8
