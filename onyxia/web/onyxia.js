// onyxia.js: replays onyxia plans (web bundles written by `onyxia web`) on WebGPU, in the
// browser or in Node (npm `webgpu`). ES modules (this one and data.js), no dependencies, no build step.
//
//   import * as onyxia from "./onyxia.js";
//   const s = await onyxia.load("model/", {device});          // or an ArrayBuffer of a zipped bundle
//   const out = await s.run({x: {data: Float32Array, dims: [2, 8]}});   // {name: {data, dims, dtype}}
//   await s.updateDimensions({batch: 4});                     // patches, never recompiles
//
// The format is docs/plan-format.md (the plan document) plus onyxia/web/bundle.py (shaders
// rendered with the uniform parameter transport, weights in device encoding). Setup happens
// once: buffers, pipelines and bind groups; a run uploads feeds, encodes the chosen steps into
// one command encoder (one compute pass between copies), submits once and reads the outputs.

// Host values <-> device bytes and the zip/.npz/.npy containers: data.js (served beside this file).
import {BITS, nbytesOf, encode, decode, readZip} from "./data.js";
export {readZip, readNpy, readNpz} from "./data.js";

export class OnyxiaError extends Error {
  constructor(message, where = {}) { super(message); this.name = new.target.name; Object.assign(this, where); }
}
export class PlanError extends OnyxiaError {}     // a bundle this runtime cannot read or replay
export class InputError extends OnyxiaError {}    // feeds or dims the plan does not take
export class DeviceError extends OnyxiaError {}   // no adapter, device lost, a failed submission
export class ShaderError extends OnyxiaError {}   // a shader that does not compile on this device
export class RunError extends OnyxiaError {}      // a kernel reported a fault (the status word)

// ---- expressions (docs/plan-format.md §3): compiled once to closures over the dims ----------
const TOKEN = /\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*(?:[-.][A-Za-z_][A-Za-z0-9_]*)*)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(\/\/|[-+*\/%()]))/y;

function floorDiv(a, b, text) {
  if (b === 0) throw new InputError(`division by zero evaluating '${text}'`);
  const q = Math.trunc(a / b);
  return (a % b !== 0 && (a < 0) !== (b < 0)) ? q - 1 : q;
}
function floorMod(a, b, text) {
  if (b === 0) throw new InputError(`division by zero evaluating '${text}'`);
  return ((a % b) + b) % b;
}

function parseExpr(text) {
  if (text.length > 1000) throw new PlanError(`expression over 1000 characters: '${text.slice(0, 40)}...'`);
  const tokens = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    const start = TOKEN.lastIndex, m = TOKEN.exec(text);
    if (!m) { if (/^\s*$/.test(text.slice(start))) break; return null; }
    if (m[1] !== undefined) tokens.push({num: Number(m[1])});
    else if (m[2] !== undefined) tokens.push({name: m[2]});
    else if (m[3] !== undefined) tokens.push({name: m[3].slice(1, -1).replace(/\\(.)/g, "$1")});
    else tokens.push({op: m[4] === "/" ? "//" : m[4]});
  }
  if (tokens.length > 256) throw new PlanError(`expression with over 256 tokens: '${text.slice(0, 40)}...'`);
  let i = 0;
  const peek = () => tokens[i], fail = () => { throw new SyntaxError(text); };
  function atom(depth) {
    if (depth > 32) throw new PlanError(`expression nested over 32 levels: '${text.slice(0, 40)}...'`);
    const t = tokens[i++];
    if (!t) fail();
    if (t.num !== undefined) return () => t.num;
    if (t.name !== undefined) {
      const name = t.name;
      return (dims) => { const v = dims[name]; if (v === undefined) throw new InputError(`symbol '${name}' has no value (expression '${text}')`); return v; };
    }
    if (t.op === "(") { const e = sum(depth + 1); if (!peek() || peek().op !== ")") fail(); i++; return e; }
    if (t.op === "-") { const e = atom(depth + 1); return (d) => -e(d); }
    if (t.op === "+") return atom(depth + 1);
    fail();
  }
  function product(depth) {
    let left = atom(depth);
    while (peek() && ["*", "//", "%"].includes(peek().op)) {
      const op = tokens[i++].op, a = left, b = atom(depth);
      left = op === "*" ? (d) => a(d) * b(d) : op === "//" ? (d) => floorDiv(a(d), b(d), text) : (d) => floorMod(a(d), b(d), text);
    }
    return left;
  }
  function sum(depth) {
    let left = product(depth);
    while (peek() && (peek().op === "+" || peek().op === "-")) {
      const op = tokens[i++].op, a = left, b = product(depth);
      left = op === "+" ? (d) => a(d) + b(d) : (d) => a(d) - b(d);
    }
    return left;
  }
  try { const e = sum(0); if (i !== tokens.length) fail(); return e; } catch (err) { if (err instanceof SyntaxError) return null; throw err; }
}

const exprCache = new Map();
// An expr (JSON integer or {"sym": TEXT}) as a function of the dims; a TEXT that does not parse
// is one symbol name (docs/plan-format.md §3).
function compileExpr(value) {
  if (typeof value === "number") return () => value;
  if (value && typeof value.f === "number") { const f = value.f; return () => f; }
  const text = typeof value === "string" ? value : value && value.sym;
  if (typeof text !== "string") throw new PlanError(`not an expression: ${JSON.stringify(value)}`);
  let fn = exprCache.get(text);
  if (!fn) {
    const parsed = parseExpr(text) || parseExpr(`'${text.replace(/'/g, "\\'")}'`);
    fn = (dims) => { const v = parsed(dims); if (!Number.isSafeInteger(v)) throw new InputError(`'${text}' evaluates to ${v}, past 2^53`); return v; };
    exprCache.set(text, fn);
  }
  return fn;
}

// The value of expression TEXT at `dims` (for tests and callers that show sizes).
export function evaluate(text, dims) { return compileExpr({sym: text})(dims); }



// ---- adapter facts (the Select guards' vocabulary, docs/plan-format.md §5) --------------------
const CPU_ADAPTER = /swiftshader|llvmpipe|lavapipe|software|cpu|warp|basic render/i;
function adapterFacts(adapter, device) {
  const info = adapter.info || {};
  const text = [info.vendor, info.architecture, info.device, info.description].join(" ");
  const kind = info.isFallbackAdapter || CPU_ADAPTER.test(text) ? "cpu" : "gpu";
  // traits (docs/plan-format.md §5): none known here, so the plans' default choices run
  return {kind, features: device.features, limits: device.limits, traits: new Set(), summary: `${text.trim() || "unknown adapter"} (${kind})`};
}

async function openDevice(options) {
  if (options.device) return {device: options.device, adapter: options.adapter || {info: options.device.adapterInfo || {}}};
  const gpu = options.gpu || globalThis.navigator?.gpu;
  if (!gpu) throw new DeviceError("WebGPU is not available here (no navigator.gpu; in Node pass {gpu} from the 'webgpu' package)");
  const adapter = await gpu.requestAdapter(options.powerPreference ? {powerPreference: options.powerPreference} : {});
  if (!adapter) throw new DeviceError("no WebGPU adapter");
  const requiredFeatures = ["shader-f16", "subgroups", "timestamp-query"].filter((f) => adapter.features.has(f) && !(options.f16 === false && f === "shader-f16"));
  const requiredLimits = {};
  for (const key in adapter.limits) if (typeof adapter.limits[key] === "number") requiredLimits[key] = adapter.limits[key];
  try {
    return {adapter, device: await adapter.requestDevice({requiredFeatures, requiredLimits})};
  } catch (err) { throw new DeviceError(`cannot open a device: ${err.message}`); }
}

// ---- the session -------------------------------------------------------------------------------
const STORAGE = 0x80 | 0x4 | 0x8;  // STORAGE | COPY_SRC | COPY_DST
const SLOT_WORDS = 64;              // the uniform transport's 256-byte slot per dispatch
const GUARDED_PLACEHOLDER = 256;    // bytes of a limit-guarded buffer past the binding limit (_limitGuarded)
const MIN_BUFFER_BYTES = 16;        // the smallest tensor buffer (runtime/dimensions.py MIN_BUFFER_BYTES)
const HOST_STEPS = new Set(["read_symbol", "branch", "loop"]);
const RELAX = "chromium_disable_uniformity_analysis";

async function fetchBytes(url, what) {
  const response = await fetch(url);
  if (!response.ok) throw new PlanError(`${what}: cannot fetch ${url} (HTTP ${response.status})`);
  return new Uint8Array(await response.arrayBuffer());
}

// A bundle: a folder URL (or its model.json URL), an ArrayBuffer of the zipped folder, or
// {manifest, chunks: [Uint8Array]}.
async function readBundle(source) {
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    const files = await readZip(source);
    if (!files.has("model.json")) throw new PlanError("the archive has no model.json (write one with `onyxia web`)");
    const manifest = JSON.parse(new TextDecoder().decode(await files.get("model.json")()));
    const chunks = [];
    for (const [name] of manifest.chunks || []) {
      if (!files.has(name)) throw new PlanError(`the archive has no weight chunk '${name}'`);
      chunks.push(await files.get(name)());
    }
    return {manifest, chunks};
  }
  if (source && source.manifest) return source;
  const url = String(source), base = url.endsWith(".json") ? url.slice(0, url.lastIndexOf("/") + 1) : url.replace(/\/?$/, "/");
  const manifest = JSON.parse(new TextDecoder().decode(await fetchBytes(url.endsWith(".json") ? url : base + "model.json", "model.json")));
  const chunks = await Promise.all((manifest.chunks || []).map(([name]) => fetchBytes(base + name, `weight chunk '${name}'`)));
  return {manifest, chunks};
}

export async function load(source, options = {}) {
  const bundle = await readBundle(source);
  const {manifest} = bundle;
  if (manifest.format !== "onyxia-web") throw new PlanError("not an onyxia web bundle (model.json format)");
  if (manifest.version !== 1) throw new PlanError(`an onyxia web bundle of version ${manifest.version}; this runtime reads version 1: run \`onyxia web\` again`);
  if (manifest.plan.format !== "onyxia-plan" || manifest.plan.version !== 9) throw new PlanError(`plan version ${manifest.plan.version}; this runtime reads version 9`);
  const {device, adapter} = await openDevice(options);
  const session = new Session(manifest, device, adapterFacts(adapter, device), options);
  await session._setup(bundle.chunks);
  return session;
}

export class Session {
  constructor(manifest, device, facts, options) {
    this.manifest = manifest; this.plan = manifest.plan; this.device = device; this.adapter = facts; this.options = options;
    this.stats = {pipelines: 0, bindGroups: 0, reallocs: 0, dispatches: 0, encodeMs: 0, readbackBytes: 0};
    this.dims = {...this.plan.dims};
    this.tensors = new Map(this.plan.tensors.map((t) => [t.name, t]));
    this.inputNames = this.plan.inputs; this.outputNames = this.plan.outputs;
    const f16 = device.features.has("shader-f16");
    this.variant = `${f16 ? 1 : 0}${f16 && (options.packedF16Reads ?? facts.kind === "cpu") ? 1 : 0}${device.features.has("subgroups") ? 1 : 0}`;
    this.root = (name) => { const t = this.tensors.get(name); if (!t) throw new PlanError(`unknown tensor '${name}'`); return t.alias_of ?? name; };
    this.shapeOf = new Map(this.plan.tensors.map((t) => [t.name, t.shape.map(compileExpr)]));
    this.staticDims = Object.fromEntries(this.plan.static_symbols.map((s) => [s, this.plan.dims[s]]));
    this.constraints = (this.plan.constraints || []).map(([a, b, node]) => [compileExpr(a), compileExpr(b), a, b, node]);
    this._compileSteps();
  }

  // Every step, flattened in pre-order (the flat index of symbolic bindings), with its exprs compiled.
  _compileSteps() {
    this.steps = []; this.writes = []; let slots = 0;
    const visit = (step, op) => {
      const s = {step, op, index: this.steps.length};
      this.steps.push(s);
      if (HOST_STEPS.has(step.t)) throw new PlanError(`step ${s.index} of '${op.name}' (${op.op_type}) is a '${step.t}' step: host control flow is not in the web runtime yet`, {step: s.index, node: op.name});
      if (step.t === "dispatch") {
        s.grid = step.workgroups.map(compileExpr);
        s.params = step.immediates.map(compileExpr);
        s.types = this.plan.shaders[step.shader].immediates.map(([, type]) => type);
        if (s.params.length) s.slot = slots++ * SLOT_WORDS;
      } else if (step.t === "copy") {
        s.size = compileExpr(step.size); s.srcOffset = compileExpr(step.src_offset); s.dstOffset = compileExpr(step.dst_offset);
      } else if (step.t === "write") {
        s.values = step.data.map(compileExpr); this.writes.push(s);
      } else if (step.t === "select") {
        s.alternatives = step.alternatives.map((alt) => ({
          guard: alt.guard.map((c) => this._clause(c)), prefer: alt.prefer.map((c) => this._clause(c)),
          steps: alt.steps.map((inner) => visit(inner, op)), label: alt.label}));
      } else throw new PlanError(`step ${s.index} of '${op.name}': unknown step kind '${step.t}'`, {step: s.index, node: op.name});
      return s;
    };
    this.top = this.plan.operations.flatMap((op) => op.steps.map((step) => visit(step, op)));
    this.params = new Uint32Array(Math.max(slots, 1) * SLOT_WORDS);
    this.guarded = this._limitGuarded();
  }

  // The roots only Select alternatives guarded by maxStorageBufferBindingSize use (FusedAttention's
  // products): past the limit they are not made, their alternatives not being eligible there
  // (onyxia/runtime/select.py limit_guarded_tensors, the same rule).
  _limitGuarded() {
    const guarded = new Set(), other = new Set();
    const uses = (step) => step.t === "dispatch" ? step.bindings.map(([name]) => name)
      : step.t === "copy" ? [step.src, step.dst] : step.t === "write" ? [step.dst] : [];
    const visit = (steps, inside) => {
      for (const step of steps) {
        if (step.t === "select") {
          for (const alt of step.alternatives) {
            visit(alt.steps, inside || alt.guard.some(([kind, name]) => kind === "limit" && name === "maxStorageBufferBindingSize"));
          }
        } else for (const name of uses(step)) (inside ? guarded : other).add(this.root(name));
      }
    };
    visit(this.plan.operations.flatMap((op) => op.steps), false);
    for (const root of other) guarded.delete(root);
    return guarded;
  }

  _clause(clause) {
    const [kind, a, b] = clause, facts = this.adapter;
    if (kind === "le") { const x = compileExpr(a), y = compileExpr(b); return (d) => x(d) <= y(d); }
    if (kind === "adapter") return () => facts.kind === a;
    if (kind === "feature") return () => facts.features.has(a);
    if (kind === "limit") { const v = compileExpr(b); return (d) => (facts.limits[a] ?? 0) >= v(d); }
    if (kind === "trait") return () => facts.traits.has(a);
    throw new PlanError(`unknown guard clause '${kind}'`);
  }

  async _setup(chunks) {
    const device = this.device;
    this.capacity = new Map(); this.buffers = new Map();
    for (const [root, nbytes] of this._sizes(this.dims)) this._allocate(root, nbytes);
    for (const [name, [chunk, offset, nbytes]] of Object.entries(this.manifest.weights)) {
      if (!chunks[chunk] || offset + nbytes > chunks[chunk].length) throw new PlanError(`weight '${name}' lies outside its chunk`, {tensor: name});
      device.queue.writeBuffer(this.buffers.get(this.root(name)), 0, chunks[chunk], offset, nbytes);
    }
    this.uniform = device.createBuffer({label: "params", size: this.params.byteLength, usage: 0x40 | 0x8});  // UNIFORM | COPY_DST
    this.paramsLayout = device.createBindGroupLayout({entries: [{binding: 0, visibility: 4, buffer: {type: "uniform", hasDynamicOffset: true}}]});
    this.paramsGroup = device.createBindGroup({layout: this.paramsLayout, entries: [{binding: 0, resource: {buffer: this.uniform, offset: 0, size: SLOT_WORDS * 4}}]});
    this.status = this.tensors.has("onyxia/status") ? this.buffers.get("onyxia/status") : null;
    await this._prepareShaders();
    this._commit(this.dims, await this._evaluate(this.dims));
  }

  // {root: bytes} at `dims`: each root sized for the largest tensor sharing it, at least one vec4
  // (MIN_BUFFER_BYTES: a kernel may bind an empty tensor as an array of vec4s).
  _sizes(dims) {
    const sizes = new Map();
    for (const t of this.plan.tensors) {
      const numel = this.shapeOf.get(t.name).reduce((n, f) => n * f(dims), 1);
      const root = t.alias_of ?? t.name, nbytes = Math.max(nbytesOf(t.dtype, numel), MIN_BUFFER_BYTES);
      if (!BITS[t.dtype]) throw new PlanError(`tensor '${t.name}' has dtype ${t.dtype}, which has no device storage`, {tensor: t.name});
      sizes.set(root, Math.max(sizes.get(root) || MIN_BUFFER_BYTES, nbytes));
    }
    return sizes;
  }

  _allocate(root, nbytes) {
    const max = this.device.limits.maxStorageBufferBindingSize;
    if (nbytes > max && this.guarded.has(root)) nbytes = GUARDED_PLACEHOLDER;  // nothing eligible binds it now
    if (nbytes > max) throw new DeviceError(`tensor '${root}' needs ${nbytes} bytes, over this device's maxStorageBufferBindingSize (${max})`, {tensor: root});
    this.buffers.get(root)?.destroy();
    this.buffers.set(root, this.device.createBuffer({label: root, size: nbytes, usage: STORAGE}));
    this.capacity.set(root, nbytes);
  }

  // Each shader's entry: its bind group layout and, once a chosen step first dispatches it, its
  // pipeline. One pipeline per distinct (WGSL, layout), created on first use and never again:
  // alternatives no dims have chosen cost nothing (SwiftShader compiles a kernel in ~1 s).
  async _prepareShaders() {
    const layouts = new Map(), byCode = new Map();
    const prefix = await this._relaxUniformity() ? `enable ${RELAX};\n` : "";
    this.pipelines = this.plan.shaders.map((shader, index) => {
      const text = this.manifest.wgsl[this.manifest.shaders[index]?.[this.variant]];
      if (text === undefined) throw new PlanError(`shader ${index} ('${shader.label}') has no WGSL for adapter variant ${this.variant}`);
      const code = prefix + text;
      const signature = shader.buffers.map((b) => (b[2] ? "r" : "w")).join("") + (shader.reports ? "w" : "");
      if (!layouts.has(signature)) {
        layouts.set(signature, this.device.createBindGroupLayout({entries: [...signature].map((c, i) => ({binding: i, visibility: 4, buffer: {type: c === "r" ? "read-only-storage" : "storage"}}))}));
      }
      const key = `${signature}|${shader.immediates.length > 0}|${code}`;
      if (!byCode.has(key)) byCode.set(key, {layout: layouts.get(signature), pipeline: null, code, index});
      return byCode.get(key);
    });
  }

  async _createPipelines(entries) {
    await Promise.all(entries.map(async (entry) => {
      const shader = this.plan.shaders[entry.index];
      const layout = this.device.createPipelineLayout({bindGroupLayouts: shader.immediates.length ? [entry.layout, this.paramsLayout] : [entry.layout]});
      const module = this.device.createShaderModule({label: shader.label, code: entry.code});
      this.stats.pipelines++;
      try {
        entry.pipeline = await this.device.createComputePipelineAsync({label: shader.label, layout, compute: {module, entryPoint: shader.entry_point}});
      } catch (err) {
        const info = module.getCompilationInfo ? await module.getCompilationInfo() : {messages: []};
        const lines = info.messages.filter((m) => m.type === "error").map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
        throw new ShaderError(`shader ${entry.index} ('${shader.label}') failed to compile on ${this.adapter.summary}: ${lines.join("; ") || err.message}`, {shader: entry.index});
      }
    }));
  }

  // onyxia's kernels are checked by naga, which has no uniformity analysis; Tint (Chrome, Dawn)
  // refuses some of them (a barrier after a branch on the `Grid` builtins struct, which mixes
  // uniform workgroup ids with the local index). Where the device accepts Chromium's extension
  // that turns the analysis off (unsafe WebGPU: --enable-unsafe-webgpu, Dawn's allow_unsafe_apis)
  // it is enabled; elsewhere such kernels fail to compile with a ShaderError naming them.
  async _relaxUniformity() {
    if (this.options.relaxUniformity === false) return false;
    this.device.pushErrorScope("validation");
    this.device.createShaderModule({code: `enable ${RELAX};\n@compute @workgroup_size(1) fn main() {}`});
    return (await this.device.popErrorScope()) === null;
  }

  // Every value at `dims`: the Selects' choices, the command list, the parameter words; the
  // pipelines it needs are created. Changes no state (_commit does), so a failure leaves the
  // session as it was.
  async _evaluate(dims) {
    const commands = [], chosen = new Map();
    const words = this.params.slice(), f32 = new Float32Array(words.buffer);
    const emit = (s) => {
      const step = s.step;
      if (step.t === "dispatch") {
        let [x, y, z] = s.grid.map((f) => f(dims));
        if (!(x && y && z)) return;  // an empty tensor
        const limit = this.device.limits.maxComputeWorkgroupsPerDimension;
        if (x > limit && y === 1) { y = Math.ceil(x / limit); x = Math.ceil(x / y); }
        if (x > limit || y > limit || z > limit) throw new InputError(`step ${s.index} of '${s.op.name}': grid ${[x, y, z]} exceeds maxComputeWorkgroupsPerDimension (${limit})`, {step: s.index, node: s.op.name});
        s.params.forEach((f, j) => { const v = f(dims); if (s.types[j] === "f32") f32[s.slot + j] = v; else words[s.slot + j] = v >>> 0; });
        commands.push({s, x, y, z});
      } else if (step.t === "copy") {
        const size = s.size(dims);
        if (size) commands.push({s, size, src: s.srcOffset(dims), dst: s.dstOffset(dims)});
      } else if (step.t === "select") {
        const eligible = s.alternatives.filter((a) => a.guard.every((c) => c(dims)));
        const alt = eligible.find((a) => a.prefer.every((c) => c(dims))) || eligible[0];
        if (!alt) throw new PlanError(`select step ${s.index} of '${s.op.name}' has no eligible alternative`, {step: s.index});
        chosen.set(s.index, alt.label);
        alt.steps.forEach(emit);
      }
    };
    this.top.forEach(emit);
    const dispatches = commands.filter((c) => c.s.step.t === "dispatch");
    await this._createPipelines([...new Set(dispatches.map((c) => this.pipelines[c.s.step.shader]))].filter((e) => !e.pipeline));
    const writes = this.writes.map((w) => [w, w.values.map((f) => f(dims))]);
    return {commands, chosen, words, writes, dispatches: dispatches.length};
  }

  _commit(dims, evaluated) {
    this.dims = dims;
    Object.assign(this, {commands: evaluated.commands, chosen: evaluated.chosen, params: evaluated.words});
    this.stats.dispatches = evaluated.dispatches;
    this.device.queue.writeBuffer(this.uniform, 0, evaluated.words);
    for (const [w, values] of evaluated.writes) {
      const bytes = encode(w.step.dtype, values, values.length, `write step ${w.index} into '${w.step.dst}'`);
      if (bytes.length) this.device.queue.writeBuffer(this.buffers.get(this.root(w.step.dst)), 0, bytes);
    }
  }

  _bindGroup(s) {
    if (s.group && s.groupBuffers.every((b, i) => b === this.buffers.get(s.roots[i]))) return s.group;
    s.roots = s.step.bindings.map(([name]) => this.root(name));
    s.groupBuffers = s.roots.map((r) => this.buffers.get(r));
    s.group = this.device.createBindGroup({layout: this.pipelines[s.step.shader].layout, entries: s.groupBuffers.map((buffer, i) => ({binding: i, resource: {buffer}}))});
    this.stats.bindGroups++;
    return s.group;
  }

  shapeAt(name, dims = this.dims) { return this.shapeOf.get(name).map((f) => f(dims)); }

  async updateDimensions(changes) {
    const dims = {...this.dims};
    for (const [name, value] of Object.entries(changes)) {
      if (!(name in this.plan.dims)) throw new InputError(`unknown dimension '${name}' (the plan's: ${Object.keys(this.plan.dims).join(", ")})`, {symbol: name});
      if (name in (this.plan.data_symbols || {})) throw new InputError(`'${name}' is set by the plan's data, not by the caller`, {symbol: name});
      if (!Number.isSafeInteger(value) || value < 0) throw new InputError(`dimension '${name}' must be a non-negative integer, got ${value}`, {symbol: name});
      if (name in this.staticDims && value !== this.staticDims[name]) throw new InputError(`'${name}' is static (baked into the shaders at ${this.staticDims[name]}): compile the bundle again to change it`, {symbol: name});
      dims[name] = value;
    }
    for (const [a, b, ta, tb, node] of this.constraints) if (a(dims) !== b(dims)) throw new InputError(`node '${node}' needs ${ta} == ${tb}, which these dims break`, {node});
    const sizes = this._sizes(dims);  // everything that can fail comes before any state changes
    const max = this.device.limits.maxStorageBufferBindingSize;
    for (const [root, nbytes] of sizes) if (nbytes > max && !this.guarded.has(root)) throw new InputError(`tensor '${root}' would need ${nbytes} bytes at these dims, over this device's maxStorageBufferBindingSize (${max})`, {tensor: root});
    const evaluated = await this._evaluate(dims);
    for (const [root, nbytes] of sizes) {
      if (nbytes > this.capacity.get(root) && nbytes <= max) { this._allocate(root, nbytes); this.stats.reallocs++; }
    }
    this._commit(dims, evaluated);
  }

  // Feeds: {data, dims} from the host, or {device: true} (the input's buffer as it is: a KV cache
  // the plan writes in place) or {device: "tensor"} (a copy on the device from that tensor's buffer).
  async run(feeds, {outputs = this.outputNames} = {}) {
    const device = this.device, dims = this.dims, onDevice = [];
    for (const name of Object.keys(feeds)) if (!this.inputNames.includes(name)) throw new InputError(`'${name}' is not an input (inputs: ${this.inputNames.join(", ")})`, {tensor: name});
    for (const name of this.inputNames) {
      const feed = feeds[name];
      if (!feed) throw new InputError(`input '${name}' is missing`, {tensor: name});
      const want = this.shapeAt(name), t = this.tensors.get(name);
      const got = feed.device === undefined ? feed.dims || [feed.data.length] : want;
      if (got.length !== want.length || got.some((d, i) => d !== want[i])) {
        throw new InputError(`input '${name}' has dims [${got}], expected [${want}] at dims ${JSON.stringify(dims)} (call updateDimensions to change them)`, {tensor: name});
      }
      if (feed.device !== undefined) { onDevice.push([name, feed.device]); continue; }
      const bytes = encode(t.dtype, feed.data, want.reduce((a, b) => a * b, 1), `input '${name}'`);
      if (bytes.length) device.queue.writeBuffer(this.buffers.get(this.root(name)), 0, bytes);
    }
    const start = globalThis.performance.now();
    const encoder = this.encode(this._feedCopies(onDevice));
    this.stats.encodeMs = globalThis.performance.now() - start;
    const reads = outputs.map((name) => {
      if (!this.tensors.has(name)) throw new InputError(`'${name}' is not a tensor of the plan`, {tensor: name});
      const t = this.tensors.get(name), shape = this.shapeAt(name), numel = shape.reduce((a, b) => a * b, 1);
      return {name, dtype: t.dtype, shape, numel, nbytes: nbytesOf(t.dtype, numel)};
    });
    if (this.status) reads.push({name: "onyxia/status", nbytes: 4, status: true});
    let offset = 0;
    for (const r of reads) { r.offset = offset; offset += r.nbytes; }
    // One staging buffer, kept between runs (a decode step reads 8 bytes: creating a buffer each
    // time would cost more than the copy); it grows when a run reads more.
    if (!this.staging || this.staging.size < offset) { this.staging?.destroy(); this.staging = device.createBuffer({size: Math.max(offset, 256), usage: 0x1 | 0x8}); }  // MAP_READ | COPY_DST
    const staging = this.staging;
    for (const r of reads) if (r.nbytes) encoder.copyBufferToBuffer(r.status ? this.status : this.buffers.get(this.root(r.name)), 0, staging, r.offset, r.nbytes);
    device.queue.submit([encoder.finish()]);
    try { await staging.mapAsync(1, 0, Math.max(offset, 4)); } catch (err) { throw new DeviceError(`reading the outputs back failed (device lost?): ${err.message}`); }
    const bytes = new Uint8Array(staging.getMappedRange(0, Math.max(offset, 4)).slice(0));
    staging.unmap();
    this.stats.readbackBytes = offset;
    const result = {};
    let noted = null;
    for (const r of reads) {
      if (r.status) {
        const word = new Uint32Array(bytes.buffer, r.offset, 1)[0];
        if (word) device.queue.writeBuffer(this.status, 0, new Uint32Array(1));
        if (word >= 0x80000000) {  // an error; below the top bit: a note (a lost int64 value)
          const [node, op, what] = this.plan.sites[(word & 0x7fffffff) - 1] || ["?", "?", "?"];
          throw new RunError(`node '${node}' (${op}): ${what}`, {node});
        }
        noted = word ? (this.plan.sites[word - 1] || ["?", "?", "?"]) : null;
      } else result[r.name] = {dtype: r.dtype, dims: r.shape, data: decode(r.dtype, bytes.subarray(r.offset, r.offset + r.nbytes), r.numel)};
    }
    for (const [name, t] of Object.entries(result)) {  // -2^31 marks an int64 lost to the i32 words
      if (t.dtype === "int64" && t.data.includes(-2147483648n)) {
        const [node, op] = noted || ["?", "?"];
        throw new RunError(`output '${name}': node '${node}' (${op}) gave an int64 value outside ±(2^31 - 1), the range the GPU holds int64 in`, {node});
      }
    }
    return result;
  }

  // [[src root, dst root, bytes]] for inputs fed from other tensors' buffers on the device.
  _feedCopies(onDevice) {
    return onDevice.flatMap(([name, from]) => {
      if (from === true) return [];
      if (!this.tensors.has(from)) throw new InputError(`input '${name}' is fed from '${from}', not a tensor of the plan`, {tensor: name});
      const nbytes = nbytesOf(this.tensors.get(name).dtype, this.shapeAt(name).reduce((a, b) => a * b, 1));
      return this.root(from) === this.root(name) || !nbytes ? [] : [[this.root(from), this.root(name), nbytes]];
    });
  }

  // The chosen steps into a new command encoder (after `copies`, [[src, dst, bytes]] between
  // roots): one compute pass spans each run of dispatches.
  encode(copies = []) {
    const encoder = this.device.createCommandEncoder();
    for (const [src, dst, nbytes] of copies) encoder.copyBufferToBuffer(this.buffers.get(src), 0, this.buffers.get(dst), 0, nbytes);
    let pass = null;
    for (const c of this.commands) {
      const s = c.s;
      if (s.step.t === "dispatch") {
        if (!pass) pass = encoder.beginComputePass();
        pass.setPipeline(this.pipelines[s.step.shader].pipeline);
        pass.setBindGroup(0, this._bindGroup(s));
        if (s.slot !== undefined) pass.setBindGroup(1, this.paramsGroup, [s.slot * 4]);
        pass.dispatchWorkgroups(c.x, c.y, c.z);
      } else {
        if (pass) { pass.end(); pass = null; }
        encoder.copyBufferToBuffer(this.buffers.get(this.root(s.step.src)), c.src, this.buffers.get(this.root(s.step.dst)), c.dst, c.size);
      }
    }
    if (pass) pass.end();
    return encoder;
  }

  // The alternative each Select replays at the current dims: {step index: label}.
  choices() { return Object.fromEntries(this.chosen); }

  destroy() { for (const b of this.buffers.values()) b.destroy(); this.uniform.destroy(); this.staging?.destroy(); }
}
