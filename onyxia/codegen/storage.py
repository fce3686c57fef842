"""Storage bindings: the WGSL declarations and typed accessors of a shader's buffers.

No kernel declares a storage array. Each buffer a dispatch binds is a `BufferDecl` (a name, the
ONNX dtype of its tensors, read-only or not) and this module turns the list into WGSL when the
shader is rendered, so the same plan renders for an adapter with or without shader-f16. For a
buffer `x` the kernel gets:

- `x_t`: the type the kernel computes in (f32 for every float dtype, i32/u32 for integers and
  bool; u32 storage codes for a `raw` buffer);
- `x_load(i) -> x_t`: element i, decoded from its storage;
- `x_load4(j) -> vec4<x_t>`: elements 4j .. 4j+3 (buffers declared `vector`; 32-bit types
  written there have `y_store4(j, v)` too);
- `x_store(i, v)`: element i, rounded once to the storage type (round to nearest even;
  float8 saturates as Cast's default). Elements narrower than a word are merged into their
  word with atomicAnd/atomicOr, so invocations writing neighbouring elements never race;
- `x_lanes` and `x_store_unit(u, v: array<x_t, x_lanes>)` for `whole_words` buffers: the kernel
  owns whole words (u holds elements u * x_lanes ..), plain stores and no atomics;
- `x_word(w) -> u32`: the w-th raw 32-bit word of a packed buffer; `x_word4(j) -> vec4<u32>`
  words 4j .. 4j+3 of a raw, read-only, `vector` buffer of 8- or 4-bit codes;
- `wide` (read-only) buffers: `x_load2(j) -> vec2<x_t>`, elements 2j and 2j+1, and for raw
  `vector` codes `x_word8(j) -> array<vec4<u32>, 2>`, words 8j .. 8j+7. With `wide_reads` (the
  device has shader-int64) they come as 64-bit loads: one u64 a pair of words, one vec4<u64>
  for eight words, and their `x_load4` too (two u64 a vec4 of 32-bit values, one of float16).

float16 is `array<f16>` where the device has shader-f16 (`native_f16`), otherwise pairs packed
in u32 words and converted with unpack2x16float / pack2x16float: the bytes are the same, so a
plan runs on either. A shader that reports errors (ShaderSpec.reports) also gets the plan's
status word and `onyxia_report()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from onyxia.ir.dtypes import WORD_STORAGE, DType, from_name
from onyxia.plan import STATUS_ERROR, BufferDecl

STATUS_NAME = "onyxia_status"


@dataclass(frozen=True)
class Minifloat:
    """A float format of `exp` exponent and `man` mantissa bits (float8 and float4 types)."""

    exp: int
    man: int
    bias: int
    max_code: int  # largest finite magnitude code
    overflow: str  # WGSL code of a non-saturated overflow (may use the sign `s`)
    nan: str  # WGSL code of NaN
    fnuz: bool = False  # 0x80 is the NaN and there is no negative zero
    inf_code: int | None = None  # magnitude code of infinity (e5m2 only)

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp + self.man)


MINIFLOATS = {
    "e4m3fn": Minifloat(4, 3, 7, 0x7E, "s | 0x7fu", "s | 0x7fu"),
    "e4m3fnuz": Minifloat(4, 3, 8, 0x7F, "0x80u", "0x80u", fnuz=True),
    "e5m2": Minifloat(5, 2, 15, 0x7B, "s | 0x7cu", "s | 0x7eu", inf_code=0x7C),
    "e5m2fnuz": Minifloat(5, 2, 16, 0x7F, "0x80u", "0x80u", fnuz=True),
    # No NaN/Inf: overflow saturates; NaN becomes a zero of the opposite sign (as ml_dtypes does)
    "e2m1": Minifloat(2, 1, 1, 0x7, "s | 0x7u", "s ^ 0x8u"),
}


def _f32_literal(value: float) -> str:
    return f"bitcast<f32>({_bits(value):#010x}u)"


def _bits(value: float) -> int:
    import struct
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _minifloat_code(name: str, f: Minifloat) -> str:
    man_mask = (1 << f.man) - 1
    mag_mask = f.sign_bit - 1
    rebias = 127 - f.bias
    shift = 23 - f.man
    decode = [
        f"fn onyxia_decode_{name}(b: u32) -> f32 {{",
        f"    let mag = b & {mag_mask:#x}u;",
        f"    var v = f32(mag) * {_f32_literal(2.0 ** (1 - f.bias - f.man))};  // subnormal",
        f"    if (mag > {man_mask:#x}u) {{",
        f"        v = bitcast<f32>((((mag >> {f.man}u) + {rebias}u) << 23u) | ((mag & {man_mask:#x}u) << {shift}u));",
        "    }",
    ]
    if f.inf_code is not None:
        decode += [f"    if (mag == {f.inf_code:#x}u) {{ v = bitcast<f32>(0x7f800000u); }}",
                   f"    if (mag > {f.inf_code:#x}u) {{ v = bitcast<f32>(0x7fc00000u); }}"]
    elif f.fnuz:
        decode += ["    if (b == 0x80u) { return bitcast<f32>(0x7fc00000u); }"]
    elif name == "e4m3fn":
        decode += ["    if (mag == 0x7fu) { v = bitcast<f32>(0x7fc00000u); }"]
    decode += [f"    return select(v, -v, (b & {f.sign_bit:#x}u) != 0u);", "}"]
    zero = "    if (r == 0u) { return 0u; }  // no negative zero\n" if f.fnuz else ""
    encode = f"""fn onyxia_encode_{name}(v: f32, sat: bool) -> u32 {{
    let u = bitcast<u32>(v);
    let s = (u >> 31u) << {f.exp + f.man}u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {{ return {f.nan}; }}
    var r = 0xffffffffu;  // infinity: an overflow
    if (a < {(128 - f.bias) << 23:#x}u) {{  // below the smallest normal: round() is half to even
        r = u32(round(bitcast<f32>(a) * {_f32_literal(2.0 ** (f.bias + f.man - 1))}));
    }} else if (a < 0x7f800000u) {{  // rebias the exponent, round the mantissa to nearest even
        let t = a - {rebias << 23:#x}u;
        r = (t + {(1 << (shift - 1)) - 1:#x}u + ((t >> {shift}u) & 1u)) >> {shift}u;
    }}
    if (r > {f.max_code:#x}u) {{
        if (sat) {{ return s | {f.max_code:#x}u; }}
        return {f.overflow};
    }}
{zero}    return s | r;
}}"""
    return "\n".join(decode) + "\n" + encode


_BF16 = """fn onyxia_decode_bf16(b: u32) -> f32 {
    return bitcast<f32>(b << 16u);
}
fn onyxia_encode_bf16(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return ((u >> 16u) | 0x40u) & 0xffffu; }  // quiet NaN
    return ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) & 0xffffu;
}"""

# float8e8m0 (a power of two 2^(b - 127), 0xff = NaN): numpy_helper.to_float8e8m0's rounding.
# mode 0 rounds up (away from zero), 1 down, 2 to nearest (ties up).
_E8M0 = """fn onyxia_decode_e8m0(b: u32) -> f32 {
    if (b == 0xffu) { return bitcast<f32>(0x7fc00000u); }
    return bitcast<f32>(select(b << 23u, 0x00400000u, b == 0u));
}
fn onyxia_encode_e8m0(v: f32, sat: bool, mode: u32) -> u32 {
    let u = bitcast<u32>(v);
    let e = (u >> 23u) & 0xffu;
    if (e == 0xffu) { return 0xffu; }
    var up = false;
    if (mode == 0u) {
        up = (u & 0x7fffffu) != 0u;
    } else if (mode == 2u) {
        up = (u & 0x400000u) != 0u && ((u & 0x200000u) != 0u || (u & 0x1fffffu) != 0u || e > 0u);
    }
    if (sat && e == 0xfeu) { up = false; }
    return (e + select(0u, 1u, up)) & 0xffu;
}"""


def codec_code(storage: str) -> str:
    """WGSL helpers decoding/encoding one storage codec (empty for the plain ones)."""
    if storage in MINIFLOATS:
        return _minifloat_code(storage, MINIFLOATS[storage])
    return {"bf16": _BF16, "e8m0": _E8M0}.get(storage, "")


def _decode(d: DType, b: str) -> str:
    """WGSL converting the storage code `b` (u32, upper bits zero) to the compute type."""
    s = d.storage
    if s in ("s16", "s8", "s4", "s2"):
        shift = 32 - d.bits
        return f"(bitcast<i32>({b} << {shift}u) >> {shift}u)"
    if s == "bool":
        return f"u32({b} != 0u)"
    if s == "f16":
        return f"unpack2x16float({b}).x"
    if s in ("u16", "u8", "u4", "u2"):
        return b
    return f"onyxia_decode_{s}({b})"


def _encode(d: DType, v: str) -> str:
    """WGSL converting the compute value `v` to its storage code (u32, upper bits zero)."""
    s = d.storage
    mask = f"{(1 << d.bits) - 1:#x}u"
    if s in ("s16", "s8", "s4", "s2", "u16", "u8", "u4", "u2"):
        return f"(u32({v}) & {mask})"  # narrow integers wrap, as numpy and onnxruntime do
    if s == "bool":
        return f"select(0u, 1u, {v} != 0u)"
    if s == "f16":
        return f"(pack2x16float(vec2<f32>({v}, 0.0)) & 0xffffu)"
    if s == "bf16":
        return f"onyxia_encode_bf16({v})"
    if s == "e8m0":
        return f"onyxia_encode_e8m0({v}, true, 0u)"
    return f"onyxia_encode_{s}({v}, true)"


def _halves(v: str) -> str:
    """WGSL of the u64 `v`'s two 32-bit halves, low first (two vec2/vec4 components)."""
    return f"u32({v} & 0xFFFFFFFFlu), u32({v} >> 32u)"


def _half(v: str, odd: str) -> str:
    """WGSL of the u64 `v`'s low half (`odd` 0) or high half (`odd` 1), a u32."""
    return f"u32(({v} >> (32u * ({odd}))) & 0xFFFFFFFFlu)"


def _word_buffer(b: BufferDecl, d: DType, index: int, access: str, wide_reads: bool = False) -> list[str]:
    """f32 / i32 / u32 storage: one element per word."""
    n, t = b.name, d.compute
    if b.wide and wide_reads and b.read_only:  # a u64 per pair of elements (vector: two a vec4)
        if b.vector:
            out = [f"@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<vec2<u64>>;",
                   f"fn {n}_pair(j: u32) -> u64 {{ return {n}_buf[j >> 1u][j & 1u]; }}",
                   f"fn {n}_load4(j: u32) -> vec4<{n}_t> {{ let v = {n}_buf[j]; "
                   f"return bitcast<vec4<{n}_t>>(vec4<u32>({_halves('v.x')}, {_halves('v.y')})); }}"]
        else:
            out = [f"@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<u64>;",
                   f"fn {n}_pair(j: u32) -> u64 {{ return {n}_buf[j]; }}"]
        return out + [
            f"fn {n}_load(i: u32) -> {n}_t {{ return bitcast<{n}_t>({_half(f'{n}_pair(i >> 1u)', 'i & 1u')}); }}",
            f"fn {n}_load2(j: u32) -> vec2<{n}_t> {{ let v = {n}_pair(j); "
            f"return bitcast<vec2<{n}_t>>(vec2<u32>({_halves('v')})); }}"]
    elem = f"vec4<{t}>" if b.vector else t
    out = [f"@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;"]
    at = f"{n}_buf[i >> 2u][i & 3u]" if b.vector else f"{n}_buf[i]"
    if b.raw:
        out += [f"fn {n}_load(i: u32) -> u32 {{ return bitcast<u32>({at}); }}"]
        if not b.read_only:
            out += [f"fn {n}_store(i: u32, v: u32) {{ {at} = bitcast<{t}>(v); }}"]
    else:
        out += [f"fn {n}_load(i: u32) -> {n}_t {{ return {at}; }}"]
        if not b.read_only:
            out += [f"fn {n}_store(i: u32, v: {n}_t) {{ {at} = v; }}"]
    if b.vector:
        cast = "bitcast<vec4<u32>>" if b.raw else ""
        out += [f"fn {n}_load4(j: u32) -> vec4<{n}_t> {{ return {cast}({n}_buf[j]); }}"]
        if not b.read_only and b.raw:
            out += [f"fn {n}_store4(j: u32, v: vec4<u32>) {{ {n}_buf[j] = bitcast<vec4<{t}>>(v); }}"]
        elif not b.read_only:
            out += [f"fn {n}_store4(j: u32, v: vec4<{n}_t>) {{ {n}_buf[j] = v; }}"]
    return out + _pairs(b)


def _pairs(b: BufferDecl) -> list[str]:
    """NAME_load2 from single loads, where no wider form applies."""
    n = b.name
    if not b.wide:
        return []
    return [f"fn {n}_load2(j: u32) -> vec2<{n}_t> {{ return vec2<{n}_t>({n}_load(2u * j), {n}_load(2u * j + 1u)); }}"]


def _native_f16_buffer(b: BufferDecl, index: int, access: str) -> list[str]:
    n = b.name
    elem = "vec4<f16>" if b.vector else "f16"
    out = [f"@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;"]
    at = f"{n}_buf[i >> 2u][i & 3u]" if b.vector else f"{n}_buf[i]"
    if b.raw:  # through f32 and back: exact for every f16 value (naga has no bitcast of f16)
        out += [f"fn {n}_load(i: u32) -> u32 {{ return pack2x16float(vec2<f32>(f32({at}), 0.0)) & 0xffffu; }}"]
        if not b.read_only:
            out += [f"fn {n}_store(i: u32, v: u32) {{ {at} = f16(unpack2x16float(v).x); }}"]
    else:
        out += [f"fn {n}_load(i: u32) -> f32 {{ return f32({at}); }}"]
        if not b.read_only:
            out += [f"fn {n}_store(i: u32, v: f32) {{ {at} = f16(v); }}"]
    if b.vector and not b.raw:
        out += [f"fn {n}_load4(j: u32) -> vec4<f32> {{ return vec4<f32>({n}_buf[j]); }}"]
    return out + _pairs(b)


def _packed_buffer(b: BufferDecl, d: DType, index: int, access: str, wide_reads: bool = False) -> list[str]:
    """Storage below 32 bits: `per` codes of `bits` bits to a u32 word, the first lowest."""
    n, bits = b.name, d.bits
    per, mask = 32 // bits, f"{(1 << bits) - 1:#x}u"
    atomic = not b.read_only and not b.whole_words
    pairs = b.vector and bits == 16  # vec4 reads of 16-bit data: two words at once
    # ... or one u64 (wide_reads, a `wide` read-only buffer)
    pairs64 = pairs and wide_reads and b.wide and b.read_only
    # Raw 8- and 4-bit codes read as vec4s: four whole words at once (`NAME_word4(j)`), what
    # the int4 kernels stream (one 16-byte load instead of four 4-byte ones).
    quads = b.vector and b.raw and bits < 16 and b.read_only
    # With wide_reads a `wide` buffer's quads come as 64-bit loads, two quads a vec4<u64>.
    octets = quads and wide_reads and b.wide
    elem = ("atomic<u32>" if atomic else "u64" if pairs64 else "vec2<u32>" if pairs else "vec4<u64>" if octets
            else "vec4<u32>" if quads else "u32")
    out = [f"@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;"]
    if atomic:
        word = f"atomicLoad(&{n}_buf[w])"
    elif pairs64:
        word = _half(f"{n}_buf[w >> 1u]", "w & 1u")
    elif pairs:
        word = f"{n}_buf[w >> 1u][w & 1u]"
    elif octets:  # word w: half w & 1 of u64 (w >> 1) & 3 of octet w >> 3
        word = _half(f"{n}_buf[w >> 3u][(w >> 1u) & 3u]", "w & 1u")
        out += [f"fn {n}_split(a: u64, b: u64) -> vec4<u32> {{ return vec4<u32>({_halves('a')}, {_halves('b')}); }}",
                f"fn {n}_word4(j: u32) -> vec4<u32> {{ let v = {n}_buf[j >> 1u]; "
                f"return select({n}_split(v.x, v.y), {n}_split(v.z, v.w), (j & 1u) == 1u); }}",
                f"fn {n}_word8(j: u32) -> array<vec4<u32>, 2> {{ let v = {n}_buf[j]; "
                f"return array<vec4<u32>, 2>({n}_split(v.x, v.y), {n}_split(v.z, v.w)); }}"]
    elif quads:
        word = f"{n}_buf[w >> 2u][w & 3u]"
        out += [f"fn {n}_word4(j: u32) -> vec4<u32> {{ return {n}_buf[j]; }}"]
    else:
        word = f"{n}_buf[w]"
    if quads and b.wide and not octets:
        out += [f"fn {n}_word8(j: u32) -> array<vec4<u32>, 2> {{ "
                f"return array<vec4<u32>, 2>({n}_word4(2u * j), {n}_word4(2u * j + 1u)); }}"]
    out += [f"fn {n}_word(w: u32) -> u32 {{ return {word}; }}",
            f"fn {n}_code(i: u32) -> u32 {{ return ({n}_word(i / {per}u) >> ((i % {per}u) * {bits}u)) & {mask}; }}"]
    if b.raw:
        out += [f"fn {n}_load(i: u32) -> u32 {{ return {n}_code(i); }}",
                f"fn {n}_encode(v: u32) -> u32 {{ return v & {mask}; }}"]
    else:
        out += [f"fn {n}_load(i: u32) -> {n}_t {{ return {_decode(d, f'{n}_code(i)')}; }}"]
        if not b.read_only:
            out += [f"fn {n}_encode(v: {n}_t) -> u32 {{ return {_encode(d, 'v')}; }}"]
    if b.vector:
        if pairs64:
            w = f"let v = {n}_buf[j]; let w = vec2<u32>({_halves('v')});"
            codes = ["w.x & 0xffffu", "w.x >> 16u", "w.y & 0xffffu", "w.y >> 16u"]
        elif pairs:
            w = f"let w = {n}_buf[j];"
            codes = ["w.x & 0xffffu", "w.x >> 16u", "w.y & 0xffffu", "w.y >> 16u"]
        elif bits == 8 and not quads:
            w = f"let w = {n}_buf[j];"
            codes = ["w & 0xffu", "(w >> 8u) & 0xffu", "(w >> 16u) & 0xffu", "w >> 24u"]
        else:
            w = ""
            codes = [f"{n}_code(4u * j + {k}u)" for k in range(4)]
        if b.raw:
            vals = codes
        elif d.storage == "f16" and pairs:
            vals = []
            out += [f"fn {n}_load4(j: u32) -> vec4<f32> {{ {w} "
                    "return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }"]
        else:
            vals = [_decode(d, c) for c in codes]
        if vals:
            out += [f"fn {n}_load4(j: u32) -> vec4<{n}_t> {{ {w} return vec4<{n}_t>({', '.join(vals)}); }}"]
    if atomic:
        out += [f"fn {n}_store(i: u32, v: {n}_t) {{",
                f"    let w = i / {per}u;",
                f"    let s = (i % {per}u) * {bits}u;",
                f"    atomicAnd(&{n}_buf[w], ~({mask} << s));",
                f"    atomicOr(&{n}_buf[w], {n}_encode(v) << s);",
                "}"]
    elif b.whole_words:
        out += [f"const {n}_lanes = {per}u;",
                f"fn {n}_store_unit(u: u32, v: array<{n}_t, {per}>) {{",
                "    var w = 0u;",
                f"    for (var l = 0u; l < {per}u; l++) {{ w |= {n}_encode(v[l]) << (l * {bits}u); }}",
                f"    {n}_buf[u] = w;",
                "}"]
    if b.wide and not quads:
        if d.storage == "f16" and not b.raw:  # a word holds the pair
            out += [f"fn {n}_load2(j: u32) -> vec2<f32> {{ return unpack2x16float({n}_word(j)); }}"]
        else:
            out += _pairs(b)
    return out


# int64 values live in i32 on the device: every value in ±(2^31 - 1) exactly, and -2^31 marks a
# value the GPU could not hold ("lost", as NaN marks a float: Cast of NaN/±inf/|x| >= 2^31, a sum
# past the range). Kernels computing int64 use these instead of the plain operators: a lost
# operand gives a lost result, a result out of range is lost and noted (onyxia_note: the site, not
# an error). The run refuses a lost value only where it matters: an output (the executor names the
# noted node), an index (onyxia_checked_index reports) or a read that would turn it into another
# type or an order (onyxia_known reports). A lost value a Where discards is harmless (T5's
# relative-position buckets cast log(0) = -inf to int64 and never use it).
CHECKED_I32 = """const ONYXIA_LOST = -2147483647i - 1i;
fn onyxia_lost() -> i32 {
    onyxia_note();
    return ONYXIA_LOST;
}
fn onyxia_known(a: i32) -> i32 {
    if (a == ONYXIA_LOST) { onyxia_report(); }
    return a;
}
fn onyxia_checked_add(a: i32, b: i32) -> i32 {
    let r = a + b;
    if (a == ONYXIA_LOST || b == ONYXIA_LOST) { return ONYXIA_LOST; }
    if (((a ^ r) & (b ^ r)) < 0i || r == ONYXIA_LOST) { return onyxia_lost(); }
    return r;
}
fn onyxia_checked_sub(a: i32, b: i32) -> i32 {
    let r = a - b;
    if (a == ONYXIA_LOST || b == ONYXIA_LOST) { return ONYXIA_LOST; }
    if (((a ^ b) & (a ^ r)) < 0i || r == ONYXIA_LOST) { return onyxia_lost(); }
    return r;
}
fn onyxia_checked_mul(a: i32, b: i32) -> i32 {
    let r = a * b;
    if (a == ONYXIA_LOST || b == ONYXIA_LOST) { return ONYXIA_LOST; }
    // Neither operand is -2^31 here, so the division test is exact.
    if ((a != 0i && r / a != b) || r == ONYXIA_LOST) { return onyxia_lost(); }
    return r;
}
fn onyxia_checked_max(a: i32, b: i32) -> i32 {
    return select(max(a, b), ONYXIA_LOST, a == ONYXIA_LOST || b == ONYXIA_LOST);
}
fn onyxia_checked_div(a: i32, b: i32) -> i32 {
    if (a == ONYXIA_LOST || b == ONYXIA_LOST) { return ONYXIA_LOST; }
    return a / b;  // |a / b| <= |a|: always in range
}
fn onyxia_checked_neg(a: i32) -> i32 {
    return -a;  // -(-2^31) wraps to -2^31: lost stays lost
}
fn onyxia_checked_abs(a: i32) -> i32 {
    return select(abs(a), ONYXIA_LOST, a == ONYXIA_LOST);
}
fn onyxia_checked_f32_to_i32(v: f32) -> i32 {
    // Exact for every finite value in range; NaN, ±inf and |v| >= 2^31 are lost (onnxruntime on
    // x86 gives INT64_MIN for NaN/±inf, the exact value for a finite one in the int64 range).
    if (v > -2147483648.0 && v < 2147483648.0) { return i32(trunc(v)); }
    return onyxia_lost();
}
fn onyxia_checked_u32_to_i32(v: u32) -> i32 {
    if (v > 0x7fffffffu) { return onyxia_lost(); }
    return bitcast<i32>(v);
}
// An ONNX index (negative counts back from the end) as an offset in [0, dim), reporting one
// outside [-dim, dim) (onnxruntime refuses it); the offset is clamped so the access stays inside.
fn onyxia_checked_index(k: i32, dim: u32) -> u32 {
    let j = select(k, k + i32(dim), k < 0);
    if (j < 0i || u32(j) >= dim) { onyxia_report(); }
    return min(u32(max(j, 0i)), max(dim, 1u) - 1u);
}"""


def buffer_code(buffers: Sequence[BufferDecl], *, native_f16: bool, reports: bool,
                packed_f16_reads: bool = False, wide_reads: bool = False) -> str:
    """The WGSL of every binding: `enable f16;` if needed, codec helpers, declarations, accessors.

    `packed_f16_reads`: with native f16, read-only float16 buffers read as vec4s (the matrix
    products' operands, and those read in pairs) still take the packed form, two u32 words per
    vec4 (the same bytes).
    lavapipe loads storage one scalar per invocation at a time: a word per two halves streams
    a float16 weight ~2x as fast as 16-bit loads (llama30m fp16 decode matmuls ~43 -> ~19 ms).
    `wide_reads` (the device has shader-int64): `wide` read-only buffers come as 64-bit words
    (the same bytes): lavapipe loads storage one lane and one component at a time, a 64-bit
    component as cheaply as a 32-bit one (llama30m decode, same process: fp32 27 -> 33 tok/s,
    fp16 33 -> 39, int4 see matmul_nbits_chunked)."""
    dtypes = [from_name(b.dtype) for b in buffers]
    native = native_f16 and any(d.storage == "f16" for d in dtypes)
    lines = ["enable f16;"] if native else []
    for storage in dict.fromkeys(d.storage for d in dtypes):
        code = codec_code(storage or "")
        if code:
            lines.append(code)
    for index, (b, d) in enumerate(zip(buffers, dtypes)):
        d.require_device(f"buffer '{b.name}'")
        access = "read" if b.read_only else "read_write"
        lines.append(f"alias {b.name}_t = {'u32' if b.raw else d.compute};")
        if d.storage in WORD_STORAGE:
            lines += _word_buffer(b, d, index, access, wide_reads)
        elif d.storage == "f16" and native and not (packed_f16_reads and b.read_only and (b.vector or b.wide)
                                                    and not b.raw):
            lines += _native_f16_buffer(b, index, access)
        else:
            lines += _packed_buffer(b, d, index, access, wide_reads)
        if b.whole_words and (d.storage in WORD_STORAGE or (d.storage == "f16" and native)):
            lines += [f"const {b.name}_lanes = 1u;",
                      f"fn {b.name}_store_unit(u: u32, v: array<{b.name}_t, 1>) {{ {b.name}_store(u, v[0]); }}"]
    if reports:
        lines += [f"@group(0) @binding({len(buffers)}) var<storage, read_write> {STATUS_NAME}: array<atomic<u32>>;",
                  # The highest site wins: an error (top bit) names an op that went wrong, else a
                  # note names one that lost an int64 value (plan-format.md §10).
                  f"fn onyxia_report() {{ atomicMax(&{STATUS_NAME}[0], ONYXIA_SITE() | {STATUS_ERROR:#x}u); }}",
                  f"fn onyxia_note() {{ atomicMax(&{STATUS_NAME}[0], ONYXIA_SITE()); }}", CHECKED_I32]
    return "\n".join(lines) + "\n"


__all__ = ["MINIFLOATS", "STATUS_NAME", "buffer_code", "codec_code"]
