"""The fast path for wgpu-native's struct type strings gives the types cffi's own parser gives."""

import pytest

from onyxia.runtime import ffi_types

pytest.importorskip("wgpu.backends.wgpu_native._ffi")


def test_every_typedef_pointer_and_array_matches_the_parser():
    from cffi import FFI
    from wgpu.backends.wgpu_native._ffi import ffi

    parser = ffi._parser
    names = [key.split(" ", 1)[1] for key in parser._declarations if key.startswith("typedef ")]
    assert len(names) > 300  # wgpu-native's header: the check below covers it, not a stub
    # cffi's own answer: a fresh parser over the same header declarations, no fast path
    plain = FFI()._parser
    plain._declarations = dict(parser._declarations)
    plain._included_declarations = set(getattr(parser, "_included_declarations", ()))
    # each parse costs ~15 ms (the reason for the fast path): every kind of declaration the
    # header has (struct, enum, pointer, function pointer, integer typedefs) over a spread sample
    kinds: dict[str, list[str]] = {}
    for name in names:
        kinds.setdefault(type(parser._declarations["typedef " + name][0]).__name__, []).append(name)
    sample = [name for group in kinds.values() for name in group[:: max(len(group) // 12, 1)]]
    assert len(kinds) >= 3
    checked = 0
    for name in sample:
        for text in (f"{name} *", f"{name}[]", name):
            fast = ffi_types.short_cut(parser, text)
            if fast is None:
                continue
            assert fast == plain.parse_type_and_quals(text), text
            checked += 1
    assert checked >= len(sample)
    for text in ("int *", "int[]", "char []", "uint8_t *", "uintptr_t", "float"):
        assert ffi_types.short_cut(parser, text) == plain.parse_type_and_quals(text), text


def test_other_strings_take_the_parser():
    from wgpu.backends.wgpu_native._ffi import ffi

    assert ffi_types.install(ffi)  # installed once at import, idempotent
    assert ffi_types.short_cut(ffi._parser, "unsigned int *") is None
    assert ffi_types.short_cut(ffi._parser, "uint8_t[4]") is None
    assert ffi_types.short_cut(ffi._parser, "struct WGPUChainedStruct *") is None
    assert ffi_types.short_cut(ffi._parser, "NotAType *") is None
    assert ffi.sizeof("uint32_t[3]") == 12
    ptr = ffi.new("WGPUBufferDescriptor *")
    assert ffi.typeof(ptr) is ffi.typeof("WGPUBufferDescriptor *")
    assert ffi.typeof(ptr).item.fields == ffi.typeof("WGPUBufferDescriptor").fields
