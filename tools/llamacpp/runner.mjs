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
  if (mode !== "bench" && mode !== "greedy") fail("usage: runner.mjs bench|greedy --model M ... (see the header)");
  const a = {mode, requests: Infinity, threads: 2, maxTokens: 16};
  for (let i = 0; i < rest.length; i += 2) {
    const [k, v] = [rest[i], rest[i + 1]];
    if (v === undefined) fail(`${k} needs a value`);
    if (k === "--model") a.model = v;
    else if (k === "--workload") a.workload = v;
    else if (k === "--prompt") a.prompt = v;
    else if (k === "--out") a.out = v;
    else if (k === "--requests") a.requests = Number(v);
    else if (k === "--threads") a.threads = Number(v);
    else if (k === "--max-tokens") a.maxTokens = Number(v);
    else fail(`unknown flag ${k}`);
  }
  if (!a.model) fail("--model is required");
  if (mode === "bench" && !a.workload) fail("bench: --workload is required");
  if (mode === "greedy" && a.prompt === undefined) fail("greedy: --prompt is required");
  for (const k of ["requests", "threads", "maxTokens"]) {
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

async function greedy(a, model, ctx) {
  const seq = ctx.getSequence();
  let tokens = [model.tokens.bos, ...model.tokenize(a.prompt)];
  const out = [];
  for (let i = 0; i < a.maxTokens; ++i) {
    const t = await firstToken(seq, tokens);
    if (t === undefined || t === model.tokens.eos) break;
    out.push(t);
    tokens = [t];
  }
  return {prompt: a.prompt, tokens: out, text: model.detokenize(out)};
}

const a = parseArgs(process.argv.slice(2));
if (!fs.existsSync(a.model)) fail(`cannot read model ${a.model}`);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: a.model});
const ctx = await model.createContext({contextSize: 4096, sequences: 1, threads: a.threads});
const result = a.mode === "bench" ? await bench(a, model, ctx) : await greedy(a, model, ctx);
const text = JSON.stringify(result, null, 1) + "\n";
if (a.out) fs.writeFileSync(a.out, text);
else process.stdout.write(text);
await ctx.dispose();
await model.dispose();
await llama.dispose();
