// tokenizer.js: the BPE subset of Hugging Face tokenizer.json that LLM folders use, in plain JS
// (no dependencies, works offline). Covers byte-level BPE (GPT-2, Llama 3, Qwen: ByteLevel and
// Split pre-tokenizers, ByteLevel decoder) and SentencePiece-style BPE (Llama 2, Mistral, Gemma:
// Metaspace or Replace/Prepend normalizers, byte fallback, Replace/ByteFallback/Fuse/Strip
// decoders). Anything else is refused at load with a TokenizerError naming the component.
//
//   const tok = new Tokenizer(JSON.parse(text));
//   tok.encode("Hello"); tok.decode([15496]); const stream = tok.decodeStream(); stream.step(id)

export class TokenizerError extends Error { constructor(message) { super(message); this.name = "TokenizerError"; } }

// GPT-2's byte ↔ printable character table (bytes that print stay; the rest shift past 255).
const BYTE_TO_CHAR = [], CHAR_TO_BYTE = new Map();
{
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    BYTE_TO_CHAR[b] = String.fromCodePoint(printable ? b : 256 + extra++);
    CHAR_TO_BYTE.set(BYTE_TO_CHAR[b], b);
  }
}
const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const utf8 = new TextEncoder(), utf8Decoder = () => new TextDecoder("utf-8", {fatal: false});

// A tokenizers (Rust `regex`/Oniguruma) pattern as a JS RegExp: `(?i:...)` groups spelled out
// letter by letter, possessive quantifiers made greedy (same matches for the patterns in use).
function jsRegex(source) {
  let text = source.replace(/\(\?i:((?:[^()\\]|\\.)*)\)/g, (_, body) =>
    `(?:${body.replace(/\\.|[A-Za-z]/g, (c) => (c.length === 1 ? `[${c.toLowerCase()}${c.toUpperCase()}]` : c))})`);
  text = text.replace(/\\.|\[(?:[^\]\\]|\\.)*\]|([+*?]|\{\d+(?:,\d*)?\})\+/g, (m, quantifier) => quantifier ?? m);
  try { return new RegExp(text, "gu"); } catch (err) { throw new TokenizerError(`pre-tokenizer pattern ${source} is not a JS regular expression: ${err.message}`); }
}
const escapeRegex = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const patternOf = (p, what) => {
  if (p && typeof p.Regex === "string") return jsRegex(p.Regex);
  if (p && typeof p.String === "string") return new RegExp(escapeRegex(p.String), "gu");
  throw new TokenizerError(`${what}: unsupported pattern ${JSON.stringify(p)}`);
};

// Split `text` by `regex` as tokenizers' SplitDelimiterBehavior says: Isolated (matches are
// pieces of their own), Removed (dropped) or MergedWithPrevious (glued to the piece before).
function splitBy(text, regex, behavior, invert) {
  const out = [];
  let last = 0;
  const add = (piece, isMatch) => {
    if (!piece) return;
    const delim = invert ? !isMatch : isMatch;
    if (delim && behavior === "Removed") return;
    if (delim && behavior === "MergedWithPrevious" && out.length) out[out.length - 1] += piece;
    else out.push(piece);
  };
  for (const m of text.matchAll(regex)) {
    if (m[0] === "") continue;
    add(text.slice(last, m.index), false);
    add(m[0], true);
    last = m.index + m[0].length;
  }
  add(text.slice(last), false);
  return out;
}
const SPLIT_BEHAVIORS = new Set(["Isolated", "Removed", "MergedWithPrevious"]);

function normalizer(spec) {
  if (!spec) return (s) => s;
  switch (spec.type) {
    case "NFC": case "NFD": case "NFKC": case "NFKD": return (s) => s.normalize(spec.type);
    case "Lowercase": return (s) => s.toLowerCase();
    case "Prepend": return (s) => (s.length ? spec.prepend + s : s);
    case "Replace": { const re = patternOf(spec.pattern, "Replace normalizer"); return (s) => s.replace(re, spec.content); }
    case "Sequence": { const parts = spec.normalizers.map(normalizer); return (s) => parts.reduce((t, f) => f(t), s); }
    default: throw new TokenizerError(`normalizer '${spec.type}' is not supported by tokenizer.js`);
  }
}

// A pre-tokenizer: string[] → string[] (each piece is BPE'd on its own).
function preTokenizer(spec) {
  if (!spec) return (pieces) => pieces;
  switch (spec.type) {
    case "ByteLevel": return (pieces) => pieces.flatMap((p, i) => {
      const text = spec.add_prefix_space && i === 0 && !p.startsWith(" ") ? " " + p : p;
      const parts = spec.use_regex === false ? [text] : text.match(GPT2_SPLIT) || [];
      return parts.map((part) => Array.from(utf8.encode(part), (b) => BYTE_TO_CHAR[b]).join(""));
    });
    case "Split": {
      const re = patternOf(spec.pattern, "Split pre-tokenizer");
      if (!SPLIT_BEHAVIORS.has(spec.behavior)) throw new TokenizerError(`Split pre-tokenizer behavior '${spec.behavior}' is not supported by tokenizer.js`);
      return (pieces) => pieces.flatMap((p) => splitBy(p, re, spec.behavior, spec.invert));
    }
    case "Metaspace": {
      const rep = spec.replacement ?? "\u2581", scheme = spec.prepend_scheme ?? (spec.add_prefix_space === false ? "never" : "always");
      return (pieces) => pieces.flatMap((p, i) => {
        let text = p.replace(/ /g, rep);
        if ((scheme === "always" || (scheme === "first" && i === 0)) && !text.startsWith(rep)) text = rep + text;
        return spec.split === false ? [text] : text.split(new RegExp(`(?=${escapeRegex(rep)})`, "u")).filter(Boolean);
      });
    }
    case "Sequence": { const parts = spec.pretokenizers.map(preTokenizer); return (pieces) => parts.reduce((t, f) => f(t), pieces); }
    default: throw new TokenizerError(`pre-tokenizer '${spec.type}' is not supported by tokenizer.js`);
  }
}

// A decoder: token strings → one string.
function decoder(spec) {
  if (!spec) return (tokens) => tokens.join("");
  const each = (f) => (tokens) => tokens.map(f);
  switch (spec.type) {
    case "ByteLevel": return (tokens) => [utf8Decoder().decode(new Uint8Array(tokens.join("").split("").flatMap((c) => (CHAR_TO_BYTE.has(c) ? [CHAR_TO_BYTE.get(c)] : Array.from(utf8.encode(c))))))];
    case "Replace": { const re = patternOf(spec.pattern, "Replace decoder"); return each((t) => t.replace(re, spec.content)); }
    case "ByteFallback": return (tokens) => {
      const out = []; let bytes = [];
      const flush = () => { if (bytes.length) { out.push(utf8Decoder().decode(new Uint8Array(bytes))); bytes = []; } };
      for (const t of tokens) { const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t); if (m) bytes.push(parseInt(m[1], 16)); else { flush(); out.push(t); } }
      flush();
      return out;
    };
    case "Fuse": return (tokens) => [tokens.join("")];
    case "Strip": return (tokens) => tokens.map((t, i) => {
      let s = t;
      if (i === 0) for (let k = 0; k < spec.start && s.startsWith(spec.content); k++) s = s.slice(spec.content.length);
      if (i === tokens.length - 1) for (let k = 0; k < spec.stop && s.endsWith(spec.content); k++) s = s.slice(0, -spec.content.length);
      return s;
    });
    case "Metaspace": { const rep = spec.replacement ?? "\u2581"; return (tokens) => tokens.map((t, i) => { const s = t.split(rep).join(" "); return i === 0 && spec.prepend_scheme !== "never" && s.startsWith(" ") ? s.slice(1) : s; }); }
    case "Sequence": { const parts = spec.decoders.map(decoder); return (tokens) => parts.reduce((t, f) => f(t), tokens); }
    default: throw new TokenizerError(`decoder '${spec.type}' is not supported by tokenizer.js`);
  }
}

export class Tokenizer {
  constructor(json) {
    const model = json.model || {};
    if (model.type !== "BPE") throw new TokenizerError(`model type '${model.type}' is not supported by tokenizer.js (BPE only)`);
    if (model.continuing_subword_prefix || model.end_of_word_suffix) throw new TokenizerError("BPE with continuing_subword_prefix / end_of_word_suffix is not supported by tokenizer.js");
    this.vocab = new Map(Object.entries(model.vocab));
    this.byId = [];
    for (const [piece, id] of this.vocab) this.byId[id] = piece;
    this.ranks = new Map(model.merges.map((m, i) => [Array.isArray(m) ? `${m[0]} ${m[1]}` : m, i]));
    this.byteFallback = !!model.byte_fallback; this.ignoreMerges = !!model.ignore_merges;
    this.unk = model.unk_token != null ? this.vocab.get(model.unk_token) : undefined;
    this.added = (json.added_tokens || []).slice().sort((a, b) => b.content.length - a.content.length);
    for (const t of this.added) { this.byId[t.id] = t.content; }
    this.special = new Set(this.added.filter((t) => t.special).map((t) => t.id));
    this.addedRegex = this.added.length ? new RegExp(this.added.map((t) => escapeRegex(t.content)).join("|"), "gu") : null;
    this.addedIds = new Map(this.added.map((t) => [t.content, t.id]));
    this.normalize = normalizer(json.normalizer);
    this.preTokenize = preTokenizer(json.pre_tokenizer);
    this.decodeTokens = decoder(json.decoder);
    this.template = this._template(json.post_processor);
    this.cache = new Map();
  }

  _template(spec) {
    if (!spec || spec.type === "ByteLevel") return null;
    if (spec.type === "Sequence") { const parts = spec.processors.map((p) => this._template(p)).filter(Boolean); return parts[0] || null; }
    if (spec.type !== "TemplateProcessing") throw new TokenizerError(`post-processor '${spec.type}' is not supported by tokenizer.js`);
    return spec.single.map((item) => (item.Sequence ? null : spec.special_tokens[item.SpecialToken.id].ids)).flatMap((x) => (x === null ? [null] : x));
  }

  // One pre-tokenized piece → token ids (merges applied lowest rank first).
  _bpe(piece) {
    const cached = this.cache.get(piece);
    if (cached) return cached;
    let ids;
    if (this.ignoreMerges && this.vocab.has(piece)) ids = [this.vocab.get(piece)];
    else {
      let word = Array.from(piece);
      while (word.length > 1) {
        let best = -1, rank = Infinity;
        for (let i = 0; i < word.length - 1; i++) { const r = this.ranks.get(`${word[i]} ${word[i + 1]}`); if (r !== undefined && r < rank) { rank = r; best = i; } }
        if (best < 0) break;
        const merged = word[best] + word[best + 1], next = [];
        for (let i = 0; i < word.length; i++) {
          if (i < word.length - 1 && word[i] + word[i + 1] === merged && this.ranks.get(`${word[i]} ${word[i + 1]}`) === rank) { next.push(merged); i++; } else next.push(word[i]);
        }
        word = next;
      }
      ids = word.flatMap((sym) => {
        if (this.vocab.has(sym)) return [this.vocab.get(sym)];
        if (this.byteFallback) return Array.from(utf8.encode(sym), (b) => { const id = this.vocab.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`); if (id === undefined) throw new TokenizerError(`byte fallback token <0x${b.toString(16)}> is missing`); return id; });
        if (this.unk !== undefined) return [this.unk];
        throw new TokenizerError(`'${sym}' is not in the vocabulary and the tokenizer has no unk_token`);
      });
    }
    if (this.cache.size < 65536) this.cache.set(piece, ids);
    return ids;
  }

  encode(text, {addSpecialTokens = true} = {}) {
    const ids = [], segments = [];
    let last = 0;
    if (this.addedRegex) for (const m of text.matchAll(this.addedRegex)) { segments.push([text.slice(last, m.index), false]); segments.push([m[0], true]); last = m.index + m[0].length; }
    segments.push([text.slice(last), false]);
    for (const [segment, added] of segments) {
      if (added) { ids.push(this.addedIds.get(segment)); continue; }
      if (!segment) continue;
      for (const piece of this.preTokenize([this.normalize(segment)])) ids.push(...this._bpe(piece));
    }
    if (!addSpecialTokens || !this.template) return ids;
    return this.template.flatMap((x) => (x === null ? ids : [x]));
  }

  decode(ids, {skipSpecialTokens = true} = {}) {
    const tokens = [];
    for (const id of ids) {
      if (skipSpecialTokens && this.special.has(id)) continue;
      const piece = this.byId[id];
      if (piece === undefined) throw new TokenizerError(`token id ${id} is not in the vocabulary`);
      tokens.push(piece);
    }
    return this.decodeTokens(tokens).join("");
  }

  // Streaming decode: step(id) returns the text that became complete (no partial UTF-8 shown).
  decodeStream({skipSpecialTokens = true} = {}) {
    const ids = [];
    let shown = "";
    return {step: (id) => {
      ids.push(id);
      const text = this.decode(ids, {skipSpecialTokens});
      if (text.endsWith("\uFFFD") || text.length <= shown.length || !text.startsWith(shown)) return "";
      const piece = text.slice(shown.length); shown = text;
      return piece;
    }};
  }
}
