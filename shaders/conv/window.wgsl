#define_import_path conv::window

// Patch addressing shared by the convolution kernels (the importer binds the buffers `x` and `w`;
// values are computed in T: f32, or i32 for the integer convolutions of ConvInteger / QLinearConv).
// Every spatial rank is 3-D here (z, y, x; leading unit axes for 1-D and 2-D). An output
// column j = n * P + p is batch n and output position p; a patch row k = c * KS + tap is
// input channel c of the group and kernel tap (kd, kh, kw).
// Conv: input position = output position * stride - pad + tap * dilation.
// TRANSPOSED (ConvTranspose, gather form): input position i contributes to output o when
// o + pad - tap * dilation = i * stride, so only taps meeting that divisibility read.
// Params: NCOLS, P, C, CG, MG, K, KS, ID/IH/IW, OH/OW, ISP (= ID*IH*IW), KD/KH/KW,
// SD/SH/SW, DD/DH/DW, PD/PH/PW (i32).

struct Column {
    base: u32,  // x offset of image n, first channel of the group
    z: i32,
    y: i32,
    x: i32,
}

fn conv_column(j: u32, g: u32) -> Column {
    // Past the last column the position is irrelevant but must stay a valid address.
    let jj = select(0u, j, j < NCOLS());
    let n = jj / P();
    let p = jj % P();
    let ow = p % OW();
    let t = p / OW();
    let oh = t % OH();
    let od = t / OH();
    var col: Column;
    col.base = (n * C() + g * CG()) * ISP();
#ifdef TRANSPOSED
    col.z = i32(od) + PD();
    col.y = i32(oh) + PH();
    col.x = i32(ow) + PW();
#else
    col.z = i32(od * SD()) - PD();
    col.y = i32(oh * SH()) - PH();
    col.x = i32(ow * SW()) - PW();
#endif
    return col;
}

// Element k of the column's patch; 0 in the padding (and, transposed, between strides).
fn conv_patch(col: Column, k: u32) -> #{T} {
    let c = k / KS();
    let r = k % KS();
    let kw = r % KW();
    let t = r / KW();
    let kh = t % KH();
    let kd = t / KH();
#ifdef TRANSPOSED
    let zn = col.z - i32(kd * DD());
    let yn = col.y - i32(kh * DH());
    let xn = col.x - i32(kw * DW());
    if (zn < 0 || yn < 0 || xn < 0) {
        return #{T}(0);
    }
    let zu = u32(zn);
    let yu = u32(yn);
    let xu = u32(xn);
    if (zu % SD() != 0u || yu % SH() != 0u || xu % SW() != 0u) {
        return #{T}(0);
    }
    let iz = zu / SD();
    let iy = yu / SH();
    let ix = xu / SW();
#else
    // A negative coordinate wraps to a huge u32: one comparison checks both bounds.
    let iz = u32(col.z + i32(kd * DD()));
    let iy = u32(col.y + i32(kh * DH()));
    let ix = u32(col.x + i32(kw * DW()));
#endif
    if (iz >= ID() || iy >= IH() || ix >= IW()) {
        return #{T}(0);
    }
    return #{T}(x_load(col.base + c * ISP() + (iz * IH() + iy) * IW() + ix));
}

// Weight of output channel m (within group g) for patch row k.
fn conv_weight(g: u32, m: u32, k: u32) -> #{T} {
#ifdef TRANSPOSED
    // W is [C, MG, *kernel]
    return #{T}(w_load(((g * CG() + k / KS()) * MG() + m) * KS() + k % KS()));
#else ifdef W_KMAJOR
    // W stored k-major in strips of WSTRIP channels (operators/conv/cpu.py to_kmajor):
    // [group, MG / WSTRIP, K, WSTRIP]
    return #{T}(w_load(((g * (MG() / WSTRIP()) + m / WSTRIP()) * K() + k) * WSTRIP() + m % WSTRIP()));
#else
    // W is [M, CG, *kernel]: row g * MG + m of a [M, K] matrix
    return #{T}(w_load((g * MG() + m) * K() + k));
#endif
}
