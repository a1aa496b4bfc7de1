#!/usr/bin/env node
// llama.cpp beside tierkv, through node-llama-cpp's prebuilt llama.cpp (CPU
// only; nothing is compiled or downloaded at run time). Installed with
// `npm install` in this folder (tools/llamacpp/setup.sh); docs/bench.md.
//
//   node runner.mjs bench --model M --workload F [--requests N] [--threads T] [--out R.json]
//     What a CPU user who wants prompt reuse today runs: llama.cpp's full
//     prefill of every request (BOS + prefix + query), and its saved state of
//     each prefix restored from a file followed by the query, timed to the
//     first token (the next token's distribution computed). JSON on stdout
//     or in --out; `tierkv bench --llamacpp R.json` puts it in the report.
//   node runner.mjs greedy --model M --prompt P [--max-tokens N]
//     llama.cpp's greedy continuation of BOS + P, as token ids and text
//     (tests compare it with `tierkv run --temperature 0`).
//   node runner.mjs oracle --model M --text-file T --prompts-file P [--max-tokens N]
//     The oracle for a model file: the ids of BOS + T's text, the mean
//     negative log-likelihood of each next token of it (natural log), and
//     the probabilities of the 20 likeliest tokens after all of it but its
//     last token, and the greedy continuation of BOS + each line of P
//     (token ids). Tests
//     compare them with tierkv's on the same file.
//   node runner.mjs prefill --model M [--tokens 64,256,...] [--repeats R] [--threads T] [--out R.json]
//     llama.cpp's prefill throughput on M: each batch of token ids (the
//     same ids as `tierkv bench-engine`'s, i*7919 mod the vocabulary) from an
//     empty sequence to the first token, best of R; and the process's
//     resident size before the model, after loading it, after creating
//     the context and after the prefills. `tierkv bench-engine --model M --llamacpp R.json` puts it
//     beside tierkv's (docs/models.md).
//   node runner.mjs tokenize --model M --texts-file T
//     The ids of each text in T (a JSON array of strings) as llama.cpp
//     tokenizes a rendered chat prompt: control tokens' text parsed as those
//     tokens, no BOS added; a JSON array of arrays. M may be a
//     vocabulary-only file.
//
// Request files are tierkv's (docs/workloads.md); llama.cpp tokenizes them
// with the model's own vocabulary, prefix (with BOS) and query separately,
// as tierkv does.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {getLlama} from "node-llama-cpp";

function fail(msg) {
  process.stderr.write(`runner: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const [mode, ...rest] = argv;
  if (!["bench", "greedy", "oracle", "tokenize", "prefill"].includes(mode)) fail("usage: runner.mjs bench|greedy|oracle|tokenize|prefill --model M ... (see the header)");
  const a = {mode, requests: Infinity, threads: 2, maxTokens: 16, repeats: 3, tokens: [64, 256, 512, 1024, 2048]};
  for (let i = 0; i < rest.length; i += 2) {
    const [k, v] = [rest[i], rest[i + 1]];
    if (v === undefined) fail(`${k} needs a value`);
    if (k === "--model") a.model = v;
    else if (k === "--workload") a.workload = v;
    else if (k === "--prompt") a.prompt = v;
    else if (k === "--text-file") a.textFile = v;
    else if (k === "--texts-file") a.textsFile = v;
    else if (k === "--prompts-file") a.promptsFile = v;
    else if (k === "--out") a.out = v;
    else if (k === "--requests") a.requests = Number(v);
    else if (k === "--threads") a.threads = Number(v);
    else if (k === "--max-tokens") a.maxTokens = Number(v);
    else if (k === "--repeats") a.repeats = Number(v);
    else if (k === "--tokens") a.tokens = v.split(",").map(Number);
    else fail(`unknown flag ${k}`);
  }
  if (!a.model) fail("--model is required");
  if (mode === "bench" && !a.workload) fail("bench: --workload is required");
  if (mode === "greedy" && a.prompt === undefined) fail("greedy: --prompt is required");
  if (mode === "oracle" && (!a.textFile || !a.promptsFile)) fail("oracle: --text-file and --prompts-file are required");
  if (mode === "tokenize" && !a.textsFile) fail("tokenize: --texts-file is required");
  if (!a.tokens.every((t) => Number.isInteger(t) && t >= 1)) fail("--tokens must be positive integers, comma-separated");
  for (const k of ["requests", "threads", "maxTokens", "repeats"]) {
    if (!(a[k] >= 1)) fail(`--${k} must be a positive number`);
  }
  return a;
}

// tierkv's request files: documents and requests, each error naming the line.
function readWorkload(file) {
  const docs = new Map(), reqs = [];
  fs.readFileSync(file, "utf8").split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const where = `${file} line ${i + 1}`;
    let j;
    try {
      j = JSON.parse(line);
    } catch (e) {
      fail(`${where}: not JSON (${e.message})`);
    }
    if (typeof j.document === "string") {
      if (typeof j.text !== "string" || !j.text) fail(`${where}: field 'text' must be a non-empty string`);
      docs.set(j.document, j.text);
      return;
    }
    const prefix = typeof j.prefix_doc === "string" ? docs.get(j.prefix_doc) : j.prefix;
    if (typeof prefix !== "string" || !prefix) fail(`${where}: field 'prefix' (or a defined 'prefix_doc') is required`);
    if (typeof j.query !== "string" || !j.query) fail(`${where}: field 'query' must be a non-empty string`);
    reqs.push({id: j.id ?? where, prefix, query: j.query});
  });
  if (!reqs.length) fail(`${file}: no requests`);
  return reqs;
}

function summary(v) {
  const s = [...v].sort((x, y) => x - y);
  const rank = (p) => s[Math.max(0, Math.ceil(p * s.length) - 1)];
  return {n: s.length, mean: s.reduce((x, y) => x + y, 0) / s.length, p50: rank(0.5), p99: rank(0.99)};
}

// Evaluates `tokens` after what the sequence holds; resolves when the next
// token's distribution is computed (the first token's time).
async function firstToken(seq, tokens) {
  const input = tokens.map((t, i) => (i === tokens.length - 1 ? [t, {generateNext: {token: true}}] : t));
  const out = await seq.controlledEvaluate(input);
  return out[tokens.length - 1]?.next?.token;
}

async function bench(a, model, ctx) {
  const seq = ctx.getSequence();
  const reqs = readWorkload(a.workload).slice(0, a.requests);
  const bos = model.tokens.bos;
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "tierkv-llamacpp-"));
  const states = new Map();  // prefix text -> {file, bytes, tokens}
  const full = [], restore = [], prefillTps = [], agree = [];
  try {
    for (const r of reqs) {
      const prefix = [bos, ...model.tokenize(r.prefix)], query = model.tokenize(r.query);
      if (!states.has(r.prefix)) {  // the prefix's state, saved once (not timed: tierkv's store is written by requests too)
        await seq.clearHistory();
        await seq.evaluateWithoutGeneratingNewTokens(prefix);
        const file = path.join(stateDir, `prefix-${states.size}.bin`);
        const {fileSize} = await seq.saveStateToFile(file);
        states.set(r.prefix, {file, bytes: fileSize});
      }
      await seq.clearHistory();
      let t0 = performance.now();
      const tokFull = await firstToken(seq, [...prefix, ...query]);
      const ms = performance.now() - t0;
      full.push(ms);
      prefillTps.push((prefix.length + query.length) / (ms / 1000));
      await seq.clearHistory();
      t0 = performance.now();
      await seq.loadStateFromFile(states.get(r.prefix).file, {acceptRisk: true});
      const tokRestore = await firstToken(seq, query);
      restore.push(performance.now() - t0);
      agree.push(tokFull === tokRestore ? 1 : 0);
    }
  } finally {
    fs.rmSync(stateDir, {recursive: true, force: true});
  }
  const bytes = [...states.values()].map((s) => s.bytes);
  return {
    tool: "llama.cpp via node-llama-cpp",
    workload: a.workload,
    requests: reqs.length,
    threads: a.threads,
    full_prefill_ttft_ms: summary(full),
    restore_ttft_ms: summary(restore),
    prefill_tokens_per_s_mean: prefillTps.reduce((x, y) => x + y, 0) / prefillTps.length,
    state_file_bytes_mean: bytes.reduce((x, y) => x + y, 0) / bytes.length,
    restore_first_token_agrees_with_full: agree.reduce((x, y) => x + y, 0) / agree.length,
    note: "state files are read from the page cache (written just before): llama.cpp's restore at its fastest",
  };
}

// Prefill throughput: each batch from an empty sequence to its first token,
// the best of a.repeats rounds (rounds alternate the sizes, as tierkv's do).
async function prefill(a, model, ctx, resident) {
  const seq = ctx.getSequence();
  const vocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
  if (!(vocab > 0)) fail("prefill: the model's tokenizer.ggml.tokens is missing");
  const sizes = a.tokens.filter((t) => t <= ctx.contextSize);
  const best = sizes.map(() => Infinity);
  for (let round = 0; round <= a.repeats; ++round) {  // round 0 warms up
    for (let k = 0; k < sizes.length; ++k) {
      const ids = Array.from({length: sizes[k]}, (_, i) => (i * 7919) % vocab);
      await seq.clearHistory();
      const t0 = performance.now();
      await firstToken(seq, ids);
      if (round > 0) best[k] = Math.min(best[k], performance.now() - t0);
    }
  }
  return {
    tool: "llama.cpp via node-llama-cpp",
    model: a.model,
    threads: a.threads,
    batch_size: ctx.batchSize,
    prefill: sizes.map((t, k) => ({tokens: t, ms: best[k], tokens_per_s: t / (best[k] / 1000)})),
    resident_bytes: {...resident, after_prefill: process.memoryUsage().rss, peak: process.resourceUsage().maxRSS * 1024},
  };
}

async function greedyTokens(seq, model, prompt, maxTokens) {
  await seq.clearHistory();
  let tokens = [model.tokens.bos, ...model.tokenize(prompt)];
  const out = [];
  for (let i = 0; i < maxTokens; ++i) {
    const t = await firstToken(seq, tokens);
    if (t === undefined || t === model.tokens.eos) break;
    out.push(t);
    tokens = [t];
  }
  return out;
}

async function greedy(a, model, ctx) {
  const out = await greedyTokens(ctx.getSequence(), model, a.prompt, a.maxTokens);
  return {prompt: a.prompt, tokens: out, text: model.detokenize(out)};
}

// Mean NLL of each next token of `tokens` (one pass, every position's
// distribution), and greedy continuations.
async function oracle(a, model, ctx) {
  const seq = ctx.getSequence();
  const text = fs.readFileSync(a.textFile, "utf8");
  const tokens = [model.tokens.bos, ...model.tokenize(text)];
  if (tokens.length > ctx.contextSize) fail(`${a.textFile}: ${tokens.length} tokens exceed the context (${ctx.contextSize})`);
  const out = await seq.controlledEvaluate(
      tokens.map((t, i) => (i < tokens.length - 1 ? [t, {generateNext: {probabilities: true}}] : t)));
  let nll = 0;
  for (let i = 0; i + 1 < tokens.length; ++i) {
    const p = out[i]?.next?.probabilities?.get(tokens[i + 1]);
    if (!(p > 0)) fail(`no probability for token ${i + 1}`);
    nll -= Math.log(p);
  }
  const prompts = fs.readFileSync(a.promptsFile, "utf8").split("\n").filter((l) => l.trim());
  const greedyOut = [];
  for (const p of prompts) greedyOut.push({prompt: p, tokens: await greedyTokens(seq, model, p, a.maxTokens)});
  // The last position's most probable next tokens, [token, probability].
  const last = [...(out[tokens.length - 2]?.next?.probabilities ?? new Map()).entries()].slice(0, 20);
  return {tokens, nll_mean: nll / (tokens.length - 1), last_top: last, greedy: greedyOut};
}

const a = parseArgs(process.argv.slice(2));
if (!fs.existsSync(a.model)) fail(`cannot read model ${a.model}`);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
if (a.mode === "tokenize") {
  const vocab = await llama.loadModel({modelPath: a.model, vocabOnly: true});
  const texts = JSON.parse(fs.readFileSync(a.textsFile, "utf8"));
  process.stdout.write(JSON.stringify(texts.map((t) => vocab.tokenize(t, true))) + "\n");
  await vocab.dispose();
  await llama.dispose();
  process.exit(0);
}
const rssBeforeModel = process.memoryUsage().rss;
const model = await llama.loadModel({modelPath: a.model});
const rssAfterLoad = process.memoryUsage().rss;
// The oracle keeps its K/V cache in fp32, as tierkv computes a prefill (the
// default fp16 cache rounds K and V); bench measures llama.cpp as users run it.
const kv = a.mode === "oracle" ? {experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false} : {};
const ctx = await model.createContext({contextSize: 4096, sequences: 1, threads: a.threads, ...kv});
const result = a.mode === "bench" ? await bench(a, model, ctx)
    : a.mode === "oracle" ? await oracle(a, model, ctx)
    : a.mode === "prefill" ? await prefill(a, model, ctx, {before_model: rssBeforeModel, after_load: rssAfterLoad,
                                                           after_context: process.memoryUsage().rss})
    : await greedy(a, model, ctx);
const text = JSON.stringify(result, null, 1) + "\n";
if (a.out) fs.writeFileSync(a.out, text);
else process.stdout.write(text);
await ctx.dispose();
await model.dispose();
await llama.dispose();
