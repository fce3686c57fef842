#define_import_path elementwise::math

// Scalar helpers for the elementwise expressions (operators/elementwise/elementwise.py tables).
// WGSL leaves what max/min/pow/tanh/sign do with NaN, Inf and negative bases to the driver;
// ONNX (and numpy, onnxruntime) define it, so these helpers spell it out.

fn onyxia_nan() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

fn onyxia_inf() -> f32 {
    return bitcast<f32>(0x7f800000u);
}

// Bit tests rather than `x != x`: a driver compiling with fast-math may fold that to false.
fn onyxia_isnan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn onyxia_isinf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

// NaN-propagating max/min (numpy maximum/minimum, ONNX Max/Min/Clip): WGSL's may drop a NaN.
fn onyxia_maxf(a: f32, b: f32) -> f32 {
    return select(max(a, b), a + b, onyxia_isnan(a) || onyxia_isnan(b));
}

fn onyxia_minf(a: f32, b: f32) -> f32 {
    return select(min(a, b), a + b, onyxia_isnan(a) || onyxia_isnan(b));
}

fn onyxia_signf(x: f32) -> f32 {
    return select(sign(x), x, onyxia_isnan(x));
}

// Drivers may implement the transcendental built-ins to Vulkan's loose bounds (log: 2^-21
// absolute near 1; lavapipe's asin/acos are off by 4e-4), which leaves no relative accuracy
// for small results. These keep about 1e-7 relative error everywhere.

// Cephes logf: frexp range reduction and a degree-9 polynomial.
fn onyxia_log(x: f32) -> f32 {
    if (x == 0.0) {
        return -onyxia_inf();
    }
    if (x < 0.0 || onyxia_isnan(x) || onyxia_isinf(x)) {
        return select(onyxia_nan(), x, x > 0.0);
    }
    let fr = frexp(x);
    var m = fr.fract;
    var e = f32(fr.exp);
    if (m < 0.70710678118654752) {
        e = e - 1.0;
        m = m + m - 1.0;
    } else {
        m = m - 1.0;
    }
    let z = m * m;
    var y = 7.0376836292e-2;
    y = y * m - 1.1514610310e-1;
    y = y * m + 1.1676998740e-1;
    y = y * m - 1.2420140846e-1;
    y = y * m + 1.4249322787e-1;
    y = y * m - 1.6668057665e-1;
    y = y * m + 2.0000714765e-1;
    y = y * m - 2.4999993993e-1;
    y = y * m + 3.3333331174e-1;
    y = y * m * z - 2.12194440e-4 * e - 0.5 * z;
    return m + y + 0.693359375 * e;
}

// log(1 + x) keeping the digits of a small x: the series below |x| = 1/8 (error < 2e-8
// relative). Goldberg's log(u) * x / (u - 1) trick does not survive drivers that reassociate
// (u - 1) back into x.
fn onyxia_log1p(x: f32) -> f32 {
    if (abs(x) < 0.125) {
        var p = -0.125;
        p = p * x + 0.14285714286;
        p = p * x - 0.16666666667;
        p = p * x + 0.2;
        p = p * x - 0.25;
        p = p * x + 0.33333333333;
        p = p * x - 0.5;
        return x + x * x * p;
    }
    return onyxia_log(1.0 + x);
}

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
fn onyxia_softplus(x: f32) -> f32 {
    return select(max(x, 0.0), x, onyxia_isnan(x)) + onyxia_log1p(exp(-abs(x)));
}

// Cephes atanf: reduce to |x| <= tan(pi/8), then an odd polynomial.
fn onyxia_atan(a: f32) -> f32 {
    var x = abs(a);
    var y = 0.0;
    if (x > 2.414213562373095) {
        y = 1.5707963267948966;
        x = -1.0 / x;
    } else if (x > 0.41421356237309503) {
        y = 0.7853981633974483;
        x = (x - 1.0) / (x + 1.0);
    }
    let z = x * x;
    y = y + (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * x + x;
    return select(y, -y, a < 0.0);
}

fn onyxia_asin(x: f32) -> f32 {
    let r = onyxia_atan(x / sqrt((1.0 - x) * (1.0 + x)));
    return select(r, onyxia_nan(), abs(x) > 1.0);
}

// 2 atan(sqrt((1 - x) / (1 + x))) stays accurate near x = 1, where pi/2 - asin(x) cancels.
fn onyxia_acos(x: f32) -> f32 {
    let r = 2.0 * onyxia_atan(sqrt((1.0 - x) / (1.0 + x)));
    return select(r, onyxia_nan(), abs(x) > 1.0);
}

// Large |x|: log(2|x|), where x * x would overflow.
fn onyxia_asinh(x: f32) -> f32 {
    let a = abs(x);
    var r = onyxia_log(a) + 0.6931471805599453;
    if (a < 1e8) {
        r = onyxia_log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    }
    return select(r, -r, x < 0.0);
}

fn onyxia_acosh(x: f32) -> f32 {
    if (x >= 1e8) {
        return onyxia_log(x) + 0.6931471805599453;
    }
    let t = x - 1.0;
    return select(onyxia_log1p(t + sqrt(t * (t + 2.0))), onyxia_nan(), x < 1.0);
}

fn onyxia_atanh(x: f32) -> f32 {
    let a = abs(x);
    let r = 0.5 * onyxia_log1p(2.0 * a / (1.0 - a));
    return select(r, -r, x < 0.0);
}

// Near 0 (|x| < 0.125) the series: built-ins computed through exp only have absolute accuracy
// there. tanh(|x| >= 10) is +-1 in f32; clamping keeps drivers that evaluate tanh through exp
// from returning inf / inf = NaN.
fn onyxia_tanh(x: f32) -> f32 {
    if (abs(x) < 0.125) {
        let z = x * x;
        return x + x * z * (-0.33333333333 + z * (0.13333333333 + z * -0.05396825397));
    }
    return select(tanh(clamp(x, -10.0, 10.0)), x, onyxia_isnan(x));
}

fn onyxia_sinh(x: f32) -> f32 {
    if (abs(x) < 0.125) {
        let z = x * x;
        return x + x * z * (0.16666666667 + z * (0.00833333333 + z * 0.00019841270));
    }
    return sinh(x);
}

// exp(-|x|) never overflows: sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below.
fn onyxia_sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    let s = 1.0 / (1.0 + e);
    return select(e * s, s, x >= 0.0);
}

// erf with a maximum error of about 1 ulp over all of f32 (N. Juffa's minimax fits: an odd
// polynomial near 0, 1 - exp(poly) beyond). Abramowitz-Stegun 7.1.26 is only good to 1.5e-7
// absolute, i.e. poor relative accuracy near 0.
fn onyxia_erf(a: f32) -> f32 {
    let t = abs(a);
    let s = a * a;
    if (t > 0.927734375) {
        var r = fma(-1.72853470e-5, t, 3.83197126e-4);
        let u = fma(-3.88396438e-3, t, 2.42546219e-2);
        r = fma(r, s, u);
        r = fma(r, t, -1.06777877e-1);
        r = fma(r, t, -6.34846687e-1);
        r = fma(r, t, -1.28717512e-1);
        r = fma(r, t, -t);
        // erf(|a| > 10) is 1 in f32; the polynomial would reach inf - inf = NaN at |a| = inf
        r = 1.0 - exp(select(r, -100.0, t > 10.0));
        return select(r, -r, a < 0.0);
    }
    var r = -5.96761703e-4;
    r = fma(r, s, 4.99119423e-3);
    r = fma(r, s, -2.67681349e-2);
    r = fma(r, s, 1.12819925e-1);
    r = fma(r, s, -3.76125336e-1);
    r = fma(r, s, 1.28379166e-1);
    return fma(r, a, a);
}

fn onyxia_is_odd_integer(y: f32) -> bool {
    return floor(y) == y && (y - 2.0 * floor(0.5 * y)) == 1.0;
}

// C/numpy pow. WGSL's pow is exp2(y * log2(x)): undefined for x < 0 and for x == 0, y <= 0.
fn onyxia_powf(x: f32, y: f32) -> f32 {
    let ax = abs(x);
    // pow(x, 0) = pow(1, y) = pow(-1, +-inf) = 1, even when the other operand is NaN
    if (y == 0.0 || x == 1.0 || (x == -1.0 && onyxia_isinf(y))) {
        return 1.0;
    }
    if (onyxia_isnan(x) || onyxia_isnan(y) || (x < 0.0 && floor(y) != y && !onyxia_isinf(x))) {
        return onyxia_nan(); // also a finite negative base with a non-integral exponent
    }
    if (floor(y) == y && abs(y) <= 64.0) {
        // small integral exponents (x^2, x^3, 1 / x) by squaring: pow's exp2(y * log2(x)) is
        // off by ulps there, and the base's sign comes out right by itself
        var e = u32(abs(y));
        var base = x;
        var acc = 1.0;
        loop {
            if (e == 0u) {
                break;
            }
            if ((e & 1u) == 1u) {
                acc = acc * base;
            }
            base = base * base;
            e = e >> 1u;
        }
        return select(acc, 1.0 / acc, y < 0.0);
    }
    var m = 0.0;
    if (ax == 0.0) {
        m = select(0.0, onyxia_inf(), y < 0.0);
    } else {
        m = pow(ax, y);
    }
    // odd integral exponents keep the base's sign (including -0.0)
    let negative = (bitcast<u32>(x) >> 31u) == 1u;
    return select(m, -m, negative && onyxia_is_odd_integer(y));
}

// Integer base: exact by squaring (wrapping like C) for integral exponents; otherwise through
// f32 and truncated, as onnxruntime's (int)pow(double, double) does.
fn onyxia_powi(x: i32, y: f32) -> i32 {
    if (floor(y) != y) {
        return i32(onyxia_powf(f32(x), y));
    }
    if (y < 0.0) {
        // |x| >= 2 gives a fraction that truncates to 0 (and 0 to a negative power is undefined)
        if (x == 1) {
            return 1;
        }
        if (x == -1) {
            return select(1, -1, onyxia_is_odd_integer(y));
        }
        return 0;
    }
    var e = u32(min(y, 4294967040.0));
    var base = x;
    var acc = 1;
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            acc = acc * base;
        }
        base = base * base;
        e = e >> 1u;
    }
    return acc;
}

#ifdef ONYXIA_CHECKED
// int64 Pow (a reporting kernel: onyxia_checked_mul comes with onyxia_report). A fractional or
// negative exponent cannot overflow; squaring the base is checked only when it is used again.
fn onyxia_checked_powi(x: i32, y: f32) -> i32 {
    if (floor(y) != y || y < 0.0) {
        return onyxia_powi(x, y);
    }
    var e = u32(min(y, 4294967040.0));
    var base = x;
    var acc = 1i;
    loop {
        if ((e & 1u) == 1u) {
            acc = onyxia_checked_mul(acc, base);
        }
        e = e >> 1u;
        if (e == 0u) {
            break;
        }
        base = onyxia_checked_mul(base, base);
    }
    return acc;
}
#endif

// ONNX integer Mod (fmod=0): the remainder takes the divisor's sign, like Python's %.
fn onyxia_modi(a: i32, b: i32) -> i32 {
    let r = a % b;
    return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}

// C fmod, exact: subtract the largest |b| * 2^k <= r until r < |b|; each subtraction is exact
// (Sterbenz), and r at least halves per step. WGSL's f32 % is a - b * trunc(a / b), which
// rounds, and fma is not fused on every driver.
fn onyxia_fmodf(a: f32, b: f32) -> f32 {
    let ab = abs(b);
    if (onyxia_isnan(a) || onyxia_isnan(b) || onyxia_isinf(a) || ab == 0.0) {
        return onyxia_nan();
    }
    var r = abs(a);
    for (var step = 0; step < 300 && r >= ab; step++) {
        var d = ldexp(ab, max(frexp(r).exp - frexp(ab).exp, 0));
        if (d > r) {
            d = d * 0.5;
        }
        r = r - d;
    }
    return select(r, -r, (bitcast<u32>(a) >> 31u) == 1u); // the sign of a, -0.0 included
}

// ONNX float Mod with fmod=0 (opset 28): a - floor(a / b) * b, the divisor's sign, like
// numpy.mod; a zero result takes b's sign.
fn onyxia_modf(a: f32, b: f32) -> f32 {
    let r = onyxia_fmodf(a, b);
    if (r == 0.0) {
        return select(0.0, -0.0, b < 0.0);
    }
    return select(r, r + b, (r < 0.0) != (b < 0.0));
}

// Narrow integer types live in 32-bit words: wrap results like int8/int16/uint8/uint16 would.
fn onyxia_wrap_i(v: i32, bits: u32) -> i32 {
    return (v << (32u - bits)) >> (32u - bits);
}

fn onyxia_wrap_u(v: u32, bits: u32) -> u32 {
    return v & ((1u << bits) - 1u);
}
