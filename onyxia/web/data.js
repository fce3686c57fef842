// data.js: onyxia.js's data formats: host values <-> device bytes (docs/plan-format.md §6: ONNX raw
// bytes padded to a word, 64-bit integers as 32-bit words, float16 as its bits), and the
// containers a bundle and its sample inputs come in (zip, .npz, .npy). Imports only onyxia.js' errors.

import {InputError, PlanError} from "./onyxia.js";

// ---- dtypes: bits of device storage per element; how host arrays map to device bytes --------
export const BITS = {float32: 32, int32: 32, uint32: 32, int64: 32, uint64: 32, float16: 16, bfloat16: 16, int16: 16,
  uint16: 16, int8: 8, uint8: 8, bool: 8, float8e4m3fn: 8, float8e4m3fnuz: 8, float8e5m2: 8, float8e5m2fnuz: 8,
  float8e8m0: 8, int4: 4, uint4: 4, float4e2m1: 4, int2: 2, uint2: 2};
export const HOST = {float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array,
  uint64: BigUint64Array, float16: Uint16Array, bfloat16: Uint16Array, int16: Int16Array, uint16: Uint16Array,
  int8: Int8Array, uint8: Uint8Array, bool: Uint8Array};
export const nbytesOf = (dtype, numel) => Math.ceil(numel * BITS[dtype] / 32) * 4;

function f32ToF16(v) {  // round to nearest even, as numpy's astype(float16)
  const f = new Float32Array([v]), x = new Uint32Array(f.buffer)[0];
  const sign = (x >>> 16) & 0x8000, exp = (x >>> 23) & 0xff, man = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = man | 0x800000, shift = 14 - e, half = 1 << (shift - 1);
    let r = m >>> shift; const rest = m & ((1 << shift) - 1);
    if (rest > half || (rest === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (e << 10) | (man >>> 13); const rest = man & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1))) r++;
  return sign | r;
}
function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// Host values → device bytes (a Uint8Array of nbytes). `data`: the dtype's typed array, or any
// array of numbers (float16 from numbers is rounded; int64 from numbers or BigInts).
export function encode(dtype, data, numel, what) {
  const out = new Uint8Array(nbytesOf(dtype, numel));
  if (data.length !== numel) throw new InputError(`${what}: ${data.length} values, expected ${numel}`);
  if (dtype === "int64" || dtype === "uint64") {
    const words = new Int32Array(out.buffer);
    const lo = dtype === "int64" ? -(2 ** 31) : 0, hi = dtype === "int64" ? 2 ** 31 - 1 : 2 ** 32 - 1;
    for (let i = 0; i < numel; i++) {
      const v = Number(data[i]);
      if (!(v >= lo && v <= hi) || !Number.isInteger(v)) throw new InputError(`${what}: value ${data[i]} at ${i} is outside the 32-bit range the device computes ${dtype} in`);
      words[i] = v | 0;
    }
    return out;
  }
  const Host = HOST[dtype];
  if (!Host) throw new InputError(`${what}: ${dtype} feeds are not supported by the web runtime`);
  let typed = data;
  if (!(data instanceof Host)) {
    typed = new Host(numel);
    for (let i = 0; i < numel; i++) typed[i] = dtype === "float16" ? f32ToF16(data[i]) : Number(data[i]);
  }
  out.set(new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength));
  return out;
}

// Device bytes → host values: float16 decoded to Float32Array, int64 widened to BigInt64Array.
export function decode(dtype, bytes, numel) {
  if (dtype === "int64" || dtype === "uint64") {
    const words = dtype === "int64" ? new Int32Array(bytes.buffer, bytes.byteOffset, numel) : new Uint32Array(bytes.buffer, bytes.byteOffset, numel);
    const out = dtype === "int64" ? new BigInt64Array(numel) : new BigUint64Array(numel);
    for (let i = 0; i < numel; i++) out[i] = BigInt(words[i]);
    return out;
  }
  if (dtype === "float16") {
    const bits = new Uint16Array(bytes.buffer, bytes.byteOffset, numel), out = new Float32Array(numel);
    for (let i = 0; i < numel; i++) out[i] = f16ToF32(bits[i]);
    return out;
  }
  const Host = HOST[dtype];
  if (!Host) return bytes.slice(0, nbytesOf(dtype, numel));  // packed sub-byte codes, as stored
  return new Host(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + numel * Host.BYTES_PER_ELEMENT));
}

// ---- containers: zip (a bundle as one ArrayBuffer, .npz sample inputs) and .npy ---------------
export async function readZip(buffer) {
  const bytes = new Uint8Array(buffer), view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let eocd = -1;
  for (let p = bytes.length - 22; p >= Math.max(0, bytes.length - 65557); p--) if (view.getUint32(p, true) === 0x06054b50) { eocd = p; break; }
  if (eocd < 0) throw new PlanError("not a zip archive (no end of central directory)");
  const files = new Map();
  let p = view.getUint32(eocd + 16, true);
  for (let n = view.getUint16(eocd + 10, true); n > 0; n--) {
    if (view.getUint32(p, true) !== 0x02014b50) throw new PlanError("damaged zip central directory");
    const method = view.getUint16(p + 10, true), csize = view.getUint32(p + 20, true), size = view.getUint32(p + 24, true);
    const nameLen = view.getUint16(p + 28, true), extra = view.getUint16(p + 30, true), comment = view.getUint16(p + 32, true);
    const local = view.getUint32(p + 42, true), name = new TextDecoder().decode(bytes.subarray(p + 46, p + 46 + nameLen));
    if (files.has(name)) throw new PlanError(`zip member '${name}' appears twice`);
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    const raw = bytes.subarray(start, start + csize);
    files.set(name, async () => {
      if (method === 0) return raw;
      if (method !== 8) throw new PlanError(`zip member '${name}': compression method ${method} is not supported`);
      const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
      const out = new Uint8Array(await new Response(stream).arrayBuffer());
      if (out.length !== size) throw new PlanError(`zip member '${name}' inflates to ${out.length} bytes, not ${size}`);
      return out;
    });
    p += 46 + nameLen + extra + comment;
  }
  return files;
}

const NPY_DTYPES = {"<f4": "float32", "<f2": "float16", "<i4": "int32", "<u4": "uint32", "<i8": "int64",
  "<u8": "uint64", "<i2": "int16", "<u2": "uint16", "|i1": "int8", "|u1": "uint8", "|b1": "bool"};
export function readNpy(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes[0] !== 0x93 || String.fromCharCode(...bytes.subarray(1, 6)) !== "NUMPY") throw new InputError("not an .npy array");
  const major = bytes[6], hlen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true), hstart = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.subarray(hstart, hstart + hlen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1], shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new InputError(".npy in Fortran order is not supported");
  const dtype = NPY_DTYPES[descr];
  if (!dtype) throw new InputError(`.npy dtype ${descr} is not supported`);
  const dims = shape.split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  const numel = dims.reduce((a, b) => a * b, 1), Host = dtype === "float16" ? Uint16Array : HOST[dtype];
  const start = hstart + hlen, data = new Host(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + start + numel * Host.BYTES_PER_ELEMENT));
  return {dtype, dims, data};
}

export async function readNpz(buffer) {
  const out = {};
  for (const [name, read] of await readZip(buffer)) out[name.replace(/\.npy$/, "")] = readNpy(await read());
  return out;
}
