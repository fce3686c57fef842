// DFT and STFT as radix-2 FFTs: every invocation does a constant amount of work (one element or
// one butterfly), so no loop grows with the signal length (lavapipe stops an invocation's loops
// after ~65,535 iterations; GPUs have watchdogs). operators/spectral/spectral.py plans the stages:
//
//   power-of-two length L:  LOAD, BUTTERFLY x log2 L, STORE
//   any other length (Bluestein's chirp-z: the length-L DFT as a circular convolution of
//   power-of-two size M >= 2L - 1):  CHIRP, BUTTERFLY x log2 M (on the chirp), LOAD,
//   BUTTERFLY x log2 M, MULTIPLY, BUTTERFLY x log2 M (inverse), STORE
//
// The FFT is an in-place iterative Cooley-Tukey: LOAD (and CHIRP) write their values to
// bit-reversed positions, butterfly stage s combines pairs 2^s apart, MULTIPLY multiplies by the
// chirp's spectrum and bit-reverses in place (swapping each pair once) for the inverse FFT.
// A batch of B transforms shares each dispatch: element j of transform b is work[b * M + j],
// a complex number as two f32.
//
// A short transform of any length (L <= DIRECT_MAX in operators/spectral/spectral.py) is one DIRECT
// stage instead: a thread per bin sums its L terms (exactly as the definition; more accurate
// and, that short, faster than the three FFTs of Bluestein's).
//
// Buffers: x (and window) in, y out, `work` (and Bluestein's `spectrum`) f32 scratch; the signal
// is loaded and stored through its dtype's accessors, computed in f32.
// Defs: STAGE (load | chirp | butterfly | multiply | store | direct), BLUESTEIN,
//   READS_X (load, direct), WRITES_Y (store, direct), WORK (the stages using `work`), WORK_RW
//   (those writing it), and
//   load: CHANNELS (1: real input, 2: complex), WINDOW (STFT's window), HERMITIAN (inverse of a
//         one-sided spectrum: bins past L / 2 are the conjugates of the mirrored ones);
//   butterfly: LEVEL (s), SIGN (-1 forward, 1 inverse; direct too);
//   store, direct: REAL_OUT (only the real part: the inverse of a one-sided spectrum), INVERSE (divide
//          by L).
// Params: L (transform length), B (transforms), and
//   load, direct: B2, S1, S2, SN (transform b = (b / B2, b % B2) starts at (b / B2) * S1 + (b % B2) * S2
//         in x, its element j at + j * SN), NIN (elements x holds per transform; the rest are 0);
//   load, chirp, store: CHIRP_SIGN (Bluestein: the sign of the transform, -1 forward);
//   store, direct: K (bins written), O1, O2, OK (output strides as the load's).
#import common::grid

// log2 of the FFT size M: L itself (a power of two), or Bluestein's next power of two >= 2L - 1.
fn fft_log() -> u32 {
#ifdef BLUESTEIN
    return 32u - countLeadingZeros(2u * L() - 2u);
#else
    return 32u - countLeadingZeros(L() - 1u);
#endif
}

fn bit_reverse(j: u32, lg: u32) -> u32 {
    return select(reverseBits(j) >> (32u - lg), 0u, lg == 0u);
}

// e^(sign * 2 pi i * r / n) for r < n: reduced to a quarter turn first, so that the points on
// the axes are exact (a real signal's DC and Nyquist bins get imaginary parts of exactly 0).
fn twiddle(r: u32, n: u32, sign: f32) -> vec2<f32> {
    let quarter = (4u * r) / n;
    let angle = 1.57079632679489661923 * f32((4u * r) % n) / f32(n);
    let c = cos(angle);
    let s = sin(angle);
    var v = vec2<f32>(c, s);
    if (quarter == 1u) {
        v = vec2<f32>(-s, c);
    } else if (quarter == 2u) {
        v = vec2<f32>(-c, -s);
    } else if (quarter == 3u) {
        v = vec2<f32>(s, -c);
    }
    return vec2<f32>(v.x, sign * v.y);
}

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

#ifdef BLUESTEIN
// n * n mod m without overflowing 32 bits (m < 2^31): double-and-add over n's bits, 32 steps.
fn square_mod(n: u32, m: u32) -> u32 {
    let r = n % m;
    var acc = 0u;
    for (var bit = 31i; bit >= 0i; bit--) {
        acc = (2u * acc) % m;
        if (((r >> u32(bit)) & 1u) != 0u) {
            acc = (acc + r) % m;
        }
    }
    return acc;
}

// The chirp e^(sign * i * pi * n^2 / L), its phase reduced exactly (n^2 mod 2L) before the f32
// division so that long transforms keep their accuracy.
fn chirp(n: u32, sign: f32) -> vec2<f32> {
    return twiddle(square_mod(n, 2u * L()), 2u * L(), sign);
}
#endif

#ifdef WORK
fn work_get(i: u32) -> vec2<f32> {
    return vec2<f32>(work_load(2u * i), work_load(2u * i + 1u));
}

#endif

#ifdef WORK_RW
fn work_set(i: u32, v: vec2<f32>) {
    work_store(2u * i, v.x);
    work_store(2u * i + 1u, v.y);
}
#endif

#ifdef READS_X
// Element j of transform b of the (padded, truncated, windowed or mirrored) input.
fn input_at(b: u32, j: u32) -> vec2<f32> {
    let base = (b / B2()) * S1() + (b % B2()) * S2();
#ifdef HERMITIAN
    let mirrored = j > L() / 2u;
    let bin = select(j, L() - j, mirrored);
#else
    let mirrored = false;
    let bin = j;
#endif
    if (bin >= NIN()) {
        return vec2<f32>(0.0);
    }
    let a = base + bin * SN();
#if CHANNELS == 2
    var v = vec2<f32>(f32(x_load(a)), f32(x_load(a + 1u)));
#else
    var v = vec2<f32>(f32(x_load(a)), 0.0);
#endif
    if (mirrored) {
        v.y = -v.y;
    }
#ifdef WINDOW
    v *= f32(window_load(j));
#endif
    return v;
}
#endif

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(wg: Grid) {
    let t = grid_thread(wg);
#if STAGE == direct
    // A short transform straight from its definition: bin k = sum over j of x[j] e^(-+2 pi i jk/L)
    // (L <= operators/spectral/spectral.py's DIRECT_MAX terms per invocation).
    if (t >= B() * K()) { return; }
    let b = t / K();
    let k = t % K();
    var v = vec2<f32>(0.0);
    for (var j = 0u; j < L(); j++) {
        v += cmul(input_at(b, j), twiddle((j * k) % L(), L(), f32(#{SIGN})));
    }
#else
    let lg = fft_log();
    let m = 1u << lg;
#endif
#if STAGE == load
    if (t >= B() * m) { return; }
    let b = t / m;
    let j = t % m;
    var v = vec2<f32>(0.0);
    if (j < L()) {
        v = input_at(b, j);
#ifdef BLUESTEIN
        v = cmul(v, chirp(j, CHIRP_SIGN()));
#endif
    }
    work_set(b * m + bit_reverse(j, lg), v);
#else if STAGE == chirp
    // Bluestein's filter h[j] = conj chirp at j and at M - j (a circular, symmetric sequence).
    if (t >= m) { return; }
    var v = vec2<f32>(0.0);
    if (t < L()) {
        v = chirp(t, -CHIRP_SIGN());
    } else if (m - t < L()) {
        v = chirp(m - t, -CHIRP_SIGN());
    }
    work_set(bit_reverse(t, lg), v);
#else if STAGE == butterfly
    // Stage LEVEL: pairs `half` apart, twiddle e^(SIGN * i * pi * k / half).
    if (#{LEVEL}u >= lg || t >= B() * (m / 2u)) { return; }
    let half = 1u << #{LEVEL}u;
    let b = t / (m / 2u);
    let q = t % (m / 2u);
    let k = q % half;
    let i0 = b * m + (q / half) * 2u * half + k;
    let u = work_get(i0);
    let v = cmul(work_get(i0 + half), twiddle(k, 2u * half, f32(#{SIGN})));
    work_set(i0, u + v);
    work_set(i0 + half, u - v);
#else if STAGE == multiply
    // Pointwise product with the filter's spectrum, bit-reversed in place: the thread of the
    // lower index of each pair swaps it.
    if (t >= B() * m) { return; }
    let b = t / m;
    let k = t % m;
    let r = bit_reverse(k, lg);
    if (r < k) { return; }
    let vk = cmul(work_get(b * m + k), vec2<f32>(spectrum_load(2u * k), spectrum_load(2u * k + 1u)));
    let vr = cmul(work_get(b * m + r), vec2<f32>(spectrum_load(2u * r), spectrum_load(2u * r + 1u)));
    work_set(b * m + r, vk);
    work_set(b * m + k, vr);
#else if STAGE == store
    if (t >= B() * K()) { return; }
    let b = t / K();
    let k = t % K();
    var v = work_get(b * m + k);
#ifdef BLUESTEIN
    v = cmul(v, chirp(k, CHIRP_SIGN())) / f32(m);
#endif
#endif
#ifdef WRITES_Y
#ifdef INVERSE
    v /= f32(L());
#endif
    let a = (b / B2()) * O1() + (b % B2()) * O2() + k * OK();
    y_store(a, v.x);
#ifndef REAL_OUT
    y_store(a + 1u, v.y);
#endif
#endif
}
