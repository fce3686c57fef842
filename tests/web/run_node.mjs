// Drives onyxia/web/onyxia.js in Node on Dawn (npm `webgpu`) for tests/web: loads a bundle,
// runs it on .npz inputs at several dims, and writes what came back as JSON.
//   node run_node.mjs SPEC.json
// SPEC: {"bundle": DIR, "strict": bool, "zip": bool (load from one ArrayBuffer of the zipped folder), "out": FILE,
//        "runs": [{"dims": {...} | null, "inputs": FILE.npz}], "encodeRepeats": N}
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, globals } from "webgpu";
import * as onyxia from "../../onyxia/web/onyxia.js";

Object.assign(globalThis, globals);
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const report = {ok: false};
try {
  let source;
  if (spec.zip) {
    const bytes = readFileSync(spec.bundle);
    source = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  } else {
    const manifest = JSON.parse(readFileSync(join(spec.bundle, "model.json"), "utf8"));
    source = {manifest, chunks: manifest.chunks.map(([name]) => new Uint8Array(readFileSync(join(spec.bundle, name))))};
  }
  // "strict": safe WebGPU, as an ordinary browser page has it (no Tint uniformity escape hatch;
  // see onyxia.js _relaxUniformity); otherwise unsafe APIs, as --enable-unsafe-webgpu gives.
  const gpu = create(spec.strict ? [] : ["enable-dawn-features=allow_unsafe_apis"]);
  const session = await onyxia.load(source, {gpu, relaxUniformity: !spec.strict});
  report.adapter = session.adapter.summary;
  report.variant = session.variant;
  report.runs = [];
  for (const run of spec.runs) {
    if (run.dims) await session.updateDimensions(run.dims);
    const npz = readFileSync(run.inputs);
    const feeds = await onyxia.readNpz(npz.buffer.slice(npz.byteOffset, npz.byteOffset + npz.byteLength));
    const outputs = await session.run(feeds);
    const plain = {};
    for (const [name, t] of Object.entries(outputs)) plain[name] = {dims: t.dims, dtype: t.dtype, data: Array.from(t.data, Number)};
    report.runs.push({dims: {...session.dims}, outputs: plain, stats: {...session.stats}, choices: session.choices()});
  }
  if (spec.encodeRepeats) {  // the JS replay's encode cost: encode() alone, medians over repeats
    const times = [];
    for (let i = 0; i < spec.encodeRepeats; i++) {
      const t0 = performance.now(); session.encode().finish(); times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    report.encodeMedianMs = times[times.length >> 1];
    report.dispatches = session.stats.dispatches;
  }
  report.ok = true;
} catch (err) {
  report.error = `${err.name}: ${err.message}`;
  report.errorFields = {step: err.step, tensor: err.tensor, node: err.node, symbol: err.symbol};
}
writeFileSync(spec.out, JSON.stringify(report));
process.exit(0);
