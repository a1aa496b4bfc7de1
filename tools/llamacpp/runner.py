"""llama.cpp beside tierkv, through llama-cpp-python bound to the llama.cpp
that tools/llamacpp/setup.sh built from the same PyPI source distribution
(CPU only; nothing is compiled or downloaded at run time). Run it with
`tools/llamacpp/llamacpp python tools/llamacpp/runner.py MODE ...`, which
picks the project's virtual environment and library; docs/bench.md.

  runner.py bench --model M --workload F [--requests N] [--threads T] [--out R.json]
    What a CPU user who wants prompt reuse today runs: llama.cpp's full
    prefill of every request (prefix + query), and its saved state of
    each prefix (llama_state_seq_save_file) restored from the file followed
    by the query, timed to the first token (the next token's logits
    computed). JSON on stdout or in --out; `tierkv bench --llamacpp R.json`
    puts it in the report.
  runner.py greedy --model M --prompt P [--max-tokens N]
    llama.cpp's greedy continuation of P (after BOS where the vocabulary
    adds one), as token ids and text
    (tests compare it with `tierkv run --temperature 0`).
  runner.py oracle --model M --text-file T --prompts-file P [--max-tokens N]
    The oracle for a model file, with an fp32 K/V cache and no flash
    attention (as tierkv computes a prefill): the ids of T's text (BOS first
    where the vocabulary adds one, as everywhere here), the
    mean negative log-likelihood of each next token of it (natural log),
    the probabilities of the 20 likeliest tokens after all of it but its
    last token, and the greedy continuation of each line of P (token ids). Tests compare them with tierkv's on the same file.
  runner.py positions --model M --text-file T [--window W] [--max-windows K]
    Every position's next token after T's text cut into windows of W tokens
    (T tokenized once, BOS first where the vocabulary adds one; each window
    evaluated from an empty sequence, as llama-perplexity does, with the
    oracle's fp32 K/V): per window its ids, and per position the most likely
    next token, the logit margin to the second, and the negative
    log-likelihood of the token that follows in the text.
  runner.py prefill --model M [--tokens 64,256,...] [--repeats R] [--threads T] [--out R.json]
    llama.cpp's prefill throughput on M: each batch of token ids (the same
    ids as `tierkv bench-engine`'s, i*7919 mod the vocabulary) from an empty
    sequence to the first token, best of R; and the process's resident size
    before the model, after loading it, after creating the context and after
    the prefills. `tierkv bench-engine --model M --llamacpp R.json` puts it
    beside tierkv's (docs/models.md).
  runner.py tokenize --model M --texts-file T
    The ids of each text in T (a JSON array of strings) as llama.cpp
    tokenizes a rendered chat prompt: control tokens' text parsed as those
    tokens, no BOS added; a JSON array of arrays. M may be a vocabulary-only
    file.

Request files are tierkv's (docs/workloads.md); llama.cpp tokenizes them
with the model's own vocabulary, prefix (with BOS where the vocabulary adds
one) and query separately, as tierkv does. Every error is one line on stderr naming what is wrong, exit 1.
"""
import argparse
import ctypes
import json
import math
import os
import resource
import sys
import tempfile
import time

MAX_INPUT_BYTES = 256 << 20  # a workload, text or texts file larger than this is refused unread


def fail(msg):
    sys.stderr.write(f"runner: {msg}\n")
    sys.exit(1)


try:
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama
except Exception as e:  # the binding or its library is missing
    fail(f"cannot load llama-cpp-python ({e}): run tools/llamacpp/setup.sh, and this script through "
         "tools/llamacpp/llamacpp python")


MAX_CONTEXT = 131072  # --ctx and --window at most this many tokens (K/V is allocated for them)


def positive_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s!r} must be a positive integer")
    return v


def context_size(s):
    v = positive_int(s)
    if v > MAX_CONTEXT:
        raise argparse.ArgumentTypeError(f"{v} is more than {MAX_CONTEXT} tokens")
    return v


def token_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("--tokens must be positive integers, comma-separated")
    if not v or any(t < 1 for t in v):
        raise argparse.ArgumentTypeError("--tokens must be positive integers, comma-separated")
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(prog="runner.py", description="llama.cpp beside tierkv (see the module's docstring)")
    p.add_argument("mode", choices=["bench", "greedy", "oracle", "positions", "tokenize", "prefill"])
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--workload", help="bench: tierkv request file (JSONL)")
    p.add_argument("--prompt", help="greedy: the prompt after BOS")
    p.add_argument("--text-file", help="oracle: text scored token by token")
    p.add_argument("--texts-file", help="tokenize: JSON array of strings")
    p.add_argument("--prompts-file", help="oracle: one prompt per line for greedy continuations")
    p.add_argument("--out", help="write the JSON result here instead of stdout")
    p.add_argument("--requests", type=positive_int, default=None, help="bench: the first N requests only")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--max-tokens", type=positive_int, default=16)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--ctx", type=context_size, default=4096, help="context size in tokens")
    p.add_argument("--tokens", type=token_list, default=[64, 256, 512, 1024, 2048])
    p.add_argument("--window", type=context_size, default=512, help="positions: tokens per window")
    p.add_argument("--max-windows", type=positive_int, default=1 << 30, help="positions: at most this many windows")
    p.add_argument("--flash-attn", choices=["on", "off"], default="on",
                   help="bench, prefill, greedy: flash attention (oracle and positions: always off, fp32 K/V)")
    a = p.parse_args(argv)
    need = {"bench": ["workload"], "greedy": ["prompt"], "oracle": ["text_file", "prompts_file"],
            "tokenize": ["texts_file"], "prefill": [], "positions": ["text_file"]}[a.mode]
    for k in need:
        if getattr(a, k) is None:
            fail(f"{a.mode}: --{k.replace('_', '-')} is required")
    if not os.path.isfile(a.model):
        fail(f"cannot read model {a.model}")
    return a


def read_text(path, what):
    try:
        size = os.path.getsize(path)
        if size > MAX_INPUT_BYTES:
            fail(f"{path}: {size} bytes, more than the {MAX_INPUT_BYTES} a {what} may have")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        fail(f"{what} {path}: not UTF-8 (byte {e.start})")
    except OSError as e:
        fail(f"cannot read {what} {path}: {e.strerror}")


def read_workload(path):
    """tierkv's request files: documents and requests, each error naming the line."""
    docs, reqs = {}, []
    for i, line in enumerate(read_text(path, "workload").split("\n")):
        if not line.strip():
            continue
        where = f"{path} line {i + 1}"
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{where}: not JSON ({e.msg})")
        if not isinstance(j, dict):
            fail(f"{where}: not a JSON object")
        if isinstance(j.get("document"), str):
            if not isinstance(j.get("text"), str) or not j["text"]:
                fail(f"{where}: field 'text' must be a non-empty string")
            docs[j["document"]] = j["text"]
            continue
        prefix = docs.get(j["prefix_doc"]) if isinstance(j.get("prefix_doc"), str) else j.get("prefix")
        if not isinstance(prefix, str) or not prefix:
            fail(f"{where}: field 'prefix' (or a defined 'prefix_doc') is required")
        if not isinstance(j.get("query"), str) or not j["query"]:
            fail(f"{where}: field 'query' must be a non-empty string")
        reqs.append({"id": j.get("id", where), "prefix": prefix, "query": j["query"]})
    if not reqs:
        fail(f"{path}: no requests")
    return reqs


def summary(v):
    s = sorted(v)
    rank = lambda p: s[max(0, math.ceil(p * len(s)) - 1)]
    return {"n": len(s), "mean": sum(s) / len(s), "p50": rank(0.5), "p99": rank(0.99)}


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Model:
    """One llama.cpp model and context (sequence 0), with the evaluation the
    modes share. `fp32_kv`: an F32 K/V cache without flash attention (the
    oracle's); otherwise llama.cpp as users run it at its best: F16 K/V,
    flash attention as `flash_attn` says (on by default, --flash-attn)."""

    def __init__(self, path, n_ctx, threads, fp32_kv=False, logits_all=False, flash_attn=True):
        kw = dict(model_path=path, n_ctx=n_ctx, n_batch=min(n_ctx, 2048), n_ubatch=512, n_threads=threads,
                  n_threads_batch=threads, logits_all=logits_all, verbose=False, flash_attn=flash_attn)
        if fp32_kv:
            kw.update(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, flash_attn=False)
        try:
            self.llm = Llama(**kw)
        except Exception as e:
            fail(f"llama.cpp cannot load {path}: {e}")
        self.n_vocab = self.llm.n_vocab()
        self.bos = self.llm.token_bos()
        self.eos = self.llm.token_eos()

    def tokenize(self, text, special=False):
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def prompt_ids(self, text):
        """A prompt's ids as llama.cpp starts a sequence: BOS first where the
        vocabulary asks for it (tokenizer.ggml.add_bos_token, or its
        tokenizer's default), as tierkv's Encode(text, add_bos) does."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def clear(self):
        self.llm.reset()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.llm._ctx.ctx), True)

    def last_logits(self):
        """The logits after the last evaluated token (a copy)."""
        p = llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()

    def first_token(self, tokens):
        """Evaluates `tokens` after what the sequence holds; returns the
        greedy next token (its logits computed: the first token's time)."""
        if self.llm.n_tokens + len(tokens) > self.llm.n_ctx():
            fail(f"{self.llm.n_tokens + len(tokens)} tokens exceed the context ({self.llm.n_ctx()})")
        self.llm.eval(tokens)
        return int(np.argmax(self.last_logits()))

    def greedy(self, prompt, max_tokens):
        self.clear()
        tokens, out = self.prompt_ids(prompt), []
        if not tokens:
            fail(f"the prompt {prompt!r} gives no tokens (and the vocabulary adds no BOS)")
        for _ in range(max_tokens):
            t = self.first_token(tokens)
            if t == self.eos:
                break
            out.append(t)
            tokens = [t]
        return out

    def save_seq(self, path, tokens):
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        n = llama_cpp.llama_state_seq_save_file(self.llm._ctx.ctx, path.encode(), 0, arr, len(tokens))
        if n == 0:
            fail(f"llama_state_seq_save_file({path}) failed")
        return os.path.getsize(path)

    def load_seq(self, path, capacity):
        arr = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        n = llama_cpp.llama_state_seq_load_file(self.llm._ctx.ctx, path.encode(), 0, arr, capacity, ctypes.byref(count))
        if n == 0:
            fail(f"llama_state_seq_load_file({path}) failed")
        self.llm.input_ids[: count.value] = arr[: count.value]
        self.llm.n_tokens = count.value


def bench(a, m):
    reqs = read_workload(a.workload)[: a.requests]
    states = {}  # prefix text -> {file, bytes, tokens}
    full, restore, prefill_tps, agree = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tierkv-llamacpp-") as state_dir:
        for r in reqs:
            prefix, query = m.prompt_ids(r["prefix"]), m.tokenize(r["query"])
            if r["prefix"] not in states:  # saved once, not timed (tierkv's store is written by requests too)
                m.clear()
                m.first_token(prefix)
                f = os.path.join(state_dir, f"prefix-{len(states)}.bin")
                states[r["prefix"]] = {"file": f, "bytes": m.save_seq(f, prefix), "tokens": len(prefix)}
            m.clear()
            t0 = time.perf_counter()
            tok_full = m.first_token(prefix + query)
            ms = (time.perf_counter() - t0) * 1000
            full.append(ms)
            prefill_tps.append((len(prefix) + len(query)) / (ms / 1000))
            m.clear()
            t0 = time.perf_counter()
            m.load_seq(states[r["prefix"]]["file"], a.ctx)
            tok_restore = m.first_token(query)
            restore.append((time.perf_counter() - t0) * 1000)
            agree.append(1 if tok_full == tok_restore else 0)
    sizes = [s["bytes"] for s in states.values()]
    return {
        "tool": "llama.cpp via llama-cpp-python " + llama_cpp.__version__,
        "workload": a.workload,
        "requests": len(reqs),
        "threads": a.threads,
        "flash_attn": a.flash_attn,
        "full_prefill_ttft_ms": summary(full),
        "restore_ttft_ms": summary(restore),
        "prefill_tokens_per_s_mean": sum(prefill_tps) / len(prefill_tps),
        "state_file_bytes_mean": sum(sizes) / len(sizes),
        "restore_first_token_agrees_with_full": sum(agree) / len(agree),
        "note": "state files are read from the page cache (written just before): llama.cpp's restore at its fastest",
    }


def prefill(a, m, resident):
    """Each batch from an empty sequence to its first token, the best of
    a.repeats rounds (rounds alternate the sizes, as tierkv's do)."""
    sizes = [t for t in a.tokens if t <= m.llm.n_ctx()]
    best = [math.inf] * len(sizes)
    for rnd in range(a.repeats + 1):  # round 0 warms up
        for k, n in enumerate(sizes):
            ids = [(i * 7919) % m.n_vocab for i in range(n)]
            m.clear()
            t0 = time.perf_counter()
            m.first_token(ids)
            if rnd > 0:
                best[k] = min(best[k], (time.perf_counter() - t0) * 1000)
    resident.update(after_prefill=rss_bytes(), peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {
        "tool": "llama.cpp via llama-cpp-python " + llama_cpp.__version__,
        "model": a.model,
        "threads": a.threads,
        "batch_size": m.llm.n_batch,
        "prefill": [{"tokens": t, "ms": best[k], "tokens_per_s": t / (best[k] / 1000)} for k, t in enumerate(sizes)],
        "resident_bytes": resident,
    }


def log_softmax(x):
    x = x.astype(np.float64)
    mx = x.max(axis=-1, keepdims=True)
    return x - mx - np.log(np.exp(x - mx).sum(axis=-1, keepdims=True))


def oracle(a, m):
    text = read_text(a.text_file, "text file")
    tokens = m.prompt_ids(text)
    if len(tokens) < 2:
        fail(f"{a.text_file}: {len(tokens)} tokens; scoring needs at least 2")
    if len(tokens) > m.llm.n_ctx():
        fail(f"{a.text_file}: {len(tokens)} tokens exceed the context ({m.llm.n_ctx()})")
    m.clear()
    m.llm.eval(tokens)
    nll = 0.0
    rows = m.llm.scores[: len(tokens) - 1]
    for lo in range(0, len(rows), 256):  # log-softmax a block of rows at a time (bounded memory)
        lp = log_softmax(rows[lo : lo + 256])
        nxt = np.array(tokens[lo + 1 : lo + 1 + len(lp)])
        nll -= float(lp[np.arange(len(lp)), nxt].sum())
    last = np.exp(log_softmax(m.llm.scores[len(tokens) - 2]))
    top = np.argsort(-last, kind="stable")[:20]
    prompts = [l for l in read_text(a.prompts_file, "prompts file").split("\n") if l.strip()]
    greedy_out = [{"prompt": p, "tokens": m.greedy(p, a.max_tokens)} for p in prompts]
    return {"tokens": tokens, "nll_mean": nll / (len(tokens) - 1),
            "last_top": [[int(t), float(last[t])] for t in top], "greedy": greedy_out}


def positions(a, m):
    tokens = m.prompt_ids(read_text(a.text_file, "text file"))
    out = []
    for w in range(0, len(tokens) - 1, a.window):
        if len(out) == a.max_windows:
            break
        ids = tokens[w : w + a.window]
        if len(ids) < 2:
            break
        m.clear()
        m.llm.eval(ids)
        rows = m.llm.scores[: len(ids) - 1]
        top1, margin, nll = [], [], []
        for lo in range(0, len(rows), 256):
            block = rows[lo : lo + 256].astype(np.float64)
            part = np.argpartition(-block, 1, axis=1)[:, :2]
            first = block[np.arange(len(block)), part[:, 0]]
            second = block[np.arange(len(block)), part[:, 1]]
            top1 += [int(t) for t in np.argmax(block, axis=1)]
            margin += [float(x) for x in np.abs(first - second)]
            lp = log_softmax(block)
            nxt = np.array(ids[lo + 1 : lo + 1 + len(block)])
            nll += [float(-x) for x in lp[np.arange(len(block)), nxt]]
        out.append({"tokens": ids, "top1": top1, "margin": margin, "nll": nll})
    return {"window": a.window, "windows": out}


def tokenize(a):
    try:
        texts = json.loads(read_text(a.texts_file, "texts file"))
    except json.JSONDecodeError as e:
        fail(f"{a.texts_file}: not JSON ({e.msg} at line {e.lineno})")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        fail(f"{a.texts_file}: not a JSON array of strings")
    try:
        vocab = Llama(model_path=a.model, vocab_only=True, verbose=False)
    except Exception as e:
        fail(f"llama.cpp cannot load the vocabulary of {a.model}: {e}")
    return [vocab.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in texts]


def main():
    a = parse_args(sys.argv[1:])
    if a.mode == "tokenize":
        result = tokenize(a)
        sys.stdout.write(json.dumps(result) + "\n")
        return
    resident = {"before_model": rss_bytes()}
    oracle_kv = a.mode in ("oracle", "positions")
    n_ctx = max(a.ctx, a.window) if a.mode == "positions" else a.ctx
    m = Model(a.model, n_ctx, a.threads, fp32_kv=oracle_kv, logits_all=oracle_kv, flash_attn=a.flash_attn == "on")
    resident["after_load"] = resident["after_context"] = rss_bytes()  # the binding loads both at once
    if a.mode == "bench":
        result = bench(a, m)
    elif a.mode == "oracle":
        result = oracle(a, m)
    elif a.mode == "positions":
        result = positions(a, m)
    elif a.mode == "prefill":
        result = prefill(a, m, resident)
    else:
        out = m.greedy(a.prompt, a.max_tokens)
        result = {"prompt": a.prompt, "tokens": out, "text": m.llm.detokenize(out).decode("utf-8", "replace")}
    text = json.dumps(result, indent=1) + "\n"
    if a.out:
        tmp = a.out + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, a.out)
        except OSError as e:
            fail(f"cannot write --out {a.out}: {e.strerror}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
