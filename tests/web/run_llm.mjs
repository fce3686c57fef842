// Drives onyxia/web/llm.js in Node on Dawn (npm `webgpu`) for tests/web: loads an LLM web folder
// (`onyxia web FOLDER`), generates greedily from a prompt and writes the ids, text and stats as JSON.
//   node run_llm.mjs SPEC.json
// SPEC: {"folder": DIR, "prompt": TEXT, "maxNewTokens": N, "repeats": N, "strict": bool, "out": FILE}
// ("strict": safe WebGPU, as an ordinary page has it; see run_node.mjs)
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, globals } from "webgpu";
import { loadLlm } from "../../onyxia/web/llm.js";

Object.assign(globalThis, globals);
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const report = {ok: false};
const json = (name) => JSON.parse(readFileSync(join(spec.folder, name), "utf8"));
try {
  const manifest = json("model.json");
  const bundle = {manifest, chunks: manifest.chunks.map(([name]) => new Uint8Array(readFileSync(join(spec.folder, name))))};
  const llm = await loadLlm({bundle, llm: json("llm.json"), tokenizer: json("tokenizer.json")},
                            {gpu: create(spec.strict ? [] : ["enable-dawn-features=allow_unsafe_apis"]), relaxUniformity: !spec.strict});
  report.adapter = llm.session.adapter.summary;
  const prompt = llm.encode(spec.prompt);
  report.promptIds = prompt;
  report.runs = [];
  for (let i = 0; i < (spec.repeats || 1); i++) {  // a second run meets only dims seen before
    const ids = [], pieces = [], cpu = process.cpuUsage();
    for await (const {id, text} of llm.stream(prompt, {maxNewTokens: spec.maxNewTokens})) { ids.push(id); pieces.push(text); }
    const used = process.cpuUsage(cpu);  // every thread of the process: a CPU adapter's work included
    report.runs.push({ids, text: pieces.join(""), decoded: llm.decode(ids), stats: llm.stats,
                      cpuMs: (used.user + used.system) / 1000});
  }
  report.ok = true;
} catch (err) {
  report.error = `${err.name}: ${err.message}`;
}
writeFileSync(spec.out, JSON.stringify(report));
process.exit(0);
