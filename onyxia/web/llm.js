// llm.js: greedy generation with an LLM folder written by `onyxia web FOLDER` (onyxia/web/llm_bundle.py),
// on onyxia.js. The JS twin of onyxia/llm/session.py's LlmSession: one plan for prefill and
// decode, only dims changing between steps (updateDimensions: sequence, past and total length;
// no pipeline is created again), the KV cache never leaving the device (the plan writes present
// into past's buffer, or a device copy feeds present back as past) and the next token picked on
// the device (the plan's last-token head): a step reads back one token id and the status word.
//
//   import {loadLlm} from "./llm.js";
//   const llm = await loadLlm("./");                 // or {bundle: {manifest, chunks}, llm, tokenizer}
//   for await (const {id, text} of llm.stream(llm.encode("Once upon a time"), {maxNewTokens: 32})) ...

import * as onyxia from "./onyxia.js";
import {Tokenizer} from "./tokenizer.js";

async function fetchJson(url) {
  const response = await fetch(url);
  if (!response.ok) throw new onyxia.PlanError(`cannot fetch ${url} (HTTP ${response.status})`);
  return response.json();
}

export async function loadLlm(source, options = {}) {
  let bundle = source, llm, tokenizer;
  if (typeof source === "string") {
    const base = source.replace(/\/?$/, "/");
    [llm, tokenizer] = await Promise.all([fetchJson(base + "llm.json"), fetchJson(base + "tokenizer.json")]);
    bundle = base;
  } else ({bundle, llm, tokenizer} = source);
  if (!llm || llm.format !== "onyxia-web-llm" || llm.version !== 1) throw new onyxia.PlanError("llm.json is not an onyxia web LLM manifest of version 1 (write one with `onyxia web FOLDER`)");
  const session = await onyxia.load(bundle, options);
  return new LlmSession(session, llm, new Tokenizer(tokenizer));
}

export class LlmSession {
  constructor(session, llm, tokenizer) {
    this.session = session; this.llm = llm; this.tokenizer = tokenizer;
    for (const name of [llm.input_ids, llm.mask, llm.positions, ...llm.kv.flat()]) {
      if (name && !session.tensors.has(name)) throw new onyxia.PlanError(`llm.json names '${name}', which the plan does not have`, {tensor: name});
    }
    this.length = 0;  // tokens in the cache
    this.stats = {};
  }

  encode(text) { return this.tokenizer.encode(text); }
  decode(ids) { return this.tokenizer.decode(ids); }

  // Forget the cache: the next forward pass is a prefill.
  reset() { this.length = 0; }

  // `ids` (the prompt, or one new token) on top of the cache, in steps of at most prefill_length
  // tokens; returns the next token (greedy, picked on the device).
  async forward(ids) {
    if (!ids.length) throw new onyxia.InputError("no token ids given: a forward pass needs at least one");
    const vocab = this.llm.vocab_size;
    for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= vocab) throw new onyxia.InputError(`token id ${id} is outside the vocabulary (0..${vocab - 1})`);
    if (this.length + ids.length > this.llm.cache_rows) {
      throw new onyxia.InputError(`${this.length + ids.length} tokens exceed the KV cache's ${this.llm.cache_rows} rows (max_length; write the folder with a larger --max-length)`);
    }
    let token;
    for (let start = 0; start < ids.length; start += this.llm.prefill_length) token = await this._step(ids.slice(start, start + this.llm.prefill_length));
    return token;
  }

  async _step(ids) {
    const {llm, session} = this, n = ids.length, past = this.length, total = past + n;
    const dims = {[llm.sequence]: n};
    if (llm.past) dims[llm.past] = llm.share_buffer ? llm.cache_rows : past;
    if (llm.total) dims[llm.total] = total;
    if (llm.logits_gate) dims[llm.logits_gate] = 0;
    const reallocs = session.stats.reallocs;
    await session.updateDimensions(dims);
    if (past && session.stats.reallocs !== reallocs) {
      throw new onyxia.RunError(`the KV cache's buffers were reallocated at ${JSON.stringify(dims)}: the bundle's capacity is smaller than its max_length`);
    }
    const feeds = {[llm.input_ids]: {data: ids, dims: [1, n]}};
    if (llm.mask) feeds[llm.mask] = {data: new Array(total).fill(1), dims: [1, total]};
    if (llm.positions) feeds[llm.positions] = {data: Array.from({length: n}, (_, i) => past + i), dims: [1, n]};
    // The cache stays on the device: before a prefill the buffer as it is (attention reads no row
    // past the current length; a growing cache has 0 rows), then the last step's present.
    for (const [pastName, present] of llm.kv) feeds[pastName] = {device: past ? present : true};
    const out = await session.run(feeds, {outputs: [llm.next_token]});
    this.length = total;
    return Number(out[llm.next_token].data[0]);
  }

  // New token ids one by one, with the text each completes; stops after an EOS token (yielded)
  // or maxNewTokens. this.stats: prefill and decode times, pipelines created, bytes read back.
  async *stream(prompt, {maxNewTokens = this.llm.max_new_tokens, eos = this.llm.eos_token_ids} = {}) {
    if (prompt.length >= this.llm.max_length) throw new onyxia.InputError(`the prompt has ${prompt.length} tokens; max_length ${this.llm.max_length} leaves room for at most ${this.llm.max_length - 1}`);
    const budget = Math.min(maxNewTokens, this.llm.max_length - prompt.length), s = this.session.stats;
    const stats = this.stats = {promptTokens: prompt.length, prefillMs: 0, decodeTokens: 0, decodeMs: 0,
      pipelinesBefore: s.pipelines, pipelinesAfterPrefill: 0, pipelinesAfterFirstDecode: 0, pipelines: 0,
      reallocs: 0, readbackBytesPerStep: [], dispatchesPerStep: 0};
    const stop = new Set(eos), decoder = this.tokenizer.decodeStream();
    this.reset();
    if (budget <= 0) return;
    let start = performance.now();
    let token = await this.forward(prompt);
    stats.prefillMs = performance.now() - start;
    stats.pipelinesAfterPrefill = s.pipelines;
    const reallocs = s.reallocs;
    start = performance.now();
    for (let produced = 1; ; produced++) {
      stats.readbackBytesPerStep.push(s.readbackBytes);
      yield {id: token, text: decoder.step(token)};
      if (stop.has(token) || produced >= budget) break;
      token = await this.forward([token]);
      stats.decodeTokens++;
      stats.decodeMs = performance.now() - start;
      if (stats.decodeTokens === 1) stats.pipelinesAfterFirstDecode = s.pipelines;
      stats.pipelines = s.pipelines; stats.dispatchesPerStep = s.dispatches; stats.reallocs = s.reallocs - reallocs;
    }
  }

  async generate(prompt, options = {}) {
    const ids = [];
    for await (const {id} of this.stream(prompt, options)) ids.push(id);
    return ids;
  }
}
