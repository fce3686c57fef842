#define_import_path indexing::index

// An ONNX index (negative counts back from the end) as an offset in [0, dim). Out-of-range
// indices are undefined behaviour in ONNX; clamping keeps every access inside the buffer.
fn onyxia_wrap_index(k: i32, dim: u32) -> u32 {
    let j = select(k, k + i32(dim), k < 0);
    return min(u32(max(j, 0)), max(dim, 1u) - 1u);
}
