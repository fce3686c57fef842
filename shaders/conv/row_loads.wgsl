#define_import_path conv::row_loads

// Reads of one input row for the register-tiled conv kernels (conv_register, depthwise_rows):
// buffers x (scalar, or vec4 with X4) and w. IW: the row's width.

// Input element ix of the row starting at `row`, 0 in the padding (ix < 0 wraps to a huge u32).
fn ld(row: u32, ix: i32, ok: bool) -> f32 {
    let inside = ok && u32(ix) < IW();
    return select(0.0, f32(x_load(row + min(u32(ix), IW() - 1u))), inside);
}

#ifdef X4
// The aligned vec4 qi of the row starting at vec4 `row4` (IW % 4 == 0: a vec4 is all inside
// the row or all padding).
fn ld4(row4: u32, qi: i32, ok: bool) -> vec4<f32> {
    let inside = ok && u32(qi) < IW() / 4u;
    return select(vec4<f32>(), vec4<f32>(x_load4(row4 + min(u32(qi), IW() / 4u - 1u))), inside);
}
#endif

#ifdef XA
// The vec4 qi of the whole input (its element count a multiple of 4), clamped into it: a span
// at the input's first or last element reads a neighbouring vec4, masked by the caller.
fn ldq(qi: i32) -> vec4<f32> {
    return vec4<f32>(x_load4(u32(clamp(qi, 0, i32(XQ()) - 1))));
}
#endif

fn wt(i: u32) -> f32 {
    return f32(w_load(i));
}
