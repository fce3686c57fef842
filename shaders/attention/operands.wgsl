#define_import_path attention::operands

// Where a FusedAttention kernel's q, k and v start in their buffers: with OFFSETS (a def; the
// operands are parts of one fused projection's output, operators/attention/fused.py View.parts)
// the params Q0, K0, V0, else 0.
fn operand_offsets() -> vec3<u32> {
#ifdef OFFSETS
    return vec3<u32>(Q0(), K0(), V0());
#else
    return vec3<u32>(0u);
#endif
}
