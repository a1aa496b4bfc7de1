#!/usr/bin/python3
"""Trains (or continues training) the default model and exports it to GGUF.

The model is a Llama (RMSNorm, RoPE on adjacent pairs, SwiGLU) with as many
KV heads as query heads (MHA, like the papers' OPT models) and an output layer
tied to the embedding. Its numerics follow tierkv's engine, so the engine's
perplexity on the validation text must equal this script's (evaluate()).

Training runs for a time budget (--minutes), checkpoints every few minutes to
--work (model, optimiser, data position), and exports GGUF at the end. A later
session continues from the checkpoint (--resume) or, on a fresh machine, from
the committed GGUF weights (--init-gguf; the optimiser restarts).

Set-up: tools/train/setup.sh (Debian's python3-torch, python3-sentencepiece,
fortunes). Run with /usr/bin/python3 (Debian's torch is installed there).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402
import retrieval_data  # noqa: E402

DOC_SEP = "\n\f\n"


class Config:
    def __init__(self, dim=256, hidden=768, layers=8, heads=16, vocab=4096, ctx=4096,
                 rope_theta=10000.0, eps=1e-5):
        self.dim, self.hidden, self.layers, self.heads = dim, hidden, layers, heads
        self.vocab, self.ctx, self.rope_theta, self.eps = vocab, ctx, rope_theta, eps

    @property
    def head_dim(self):
        return self.dim // self.heads

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x, cos, sin):
    # x: [B, H, T, hd]; rotates adjacent pairs (2i, 2i+1), as the engine does.
    x2 = x.unflatten(-1, (-1, 2))
    a, b = x2[..., 0], x2[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.wq = nn.Linear(c.dim, c.dim, bias=False)
        self.wk = nn.Linear(c.dim, c.dim, bias=False)
        self.wv = nn.Linear(c.dim, c.dim, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.w1 = nn.Linear(c.dim, c.hidden, bias=False)  # gate
        self.w3 = nn.Linear(c.dim, c.hidden, bias=False)  # up
        self.w2 = nn.Linear(c.hidden, c.dim, bias=False)  # down

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        H, hd = self.c.heads, self.c.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, H, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, H, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, H, hd).transpose(1, 2)
        # Scale q (T*hd values) rather than the scores (T*T), and add a
        # precomputed mask inside the product: the cheap attention for torch
        # 1.13 on the CPU (NOTES-attention.md).
        q = rope(q, cos, sin) * (hd ** -0.5)
        k = rope(k, cos, sin)
        s = torch.baddbmm(mask, q.reshape(B * H, T, hd), k.reshape(B * H, T, hd).transpose(1, 2))
        p = torch.softmax(s, dim=-1)
        o = torch.bmm(p, v.reshape(B * H, T, hd)).view(B, H, T, hd).transpose(1, 2).reshape(B, T, D)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.eps)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c.layers) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        self._tables = {}

    def tables(self, T):
        if T not in self._tables:
            hd = self.c.head_dim
            i = torch.arange(0, hd, 2, dtype=torch.float32)
            freq = 1.0 / (self.c.rope_theta ** (i / hd))
            ang = torch.arange(T, dtype=torch.float32)[:, None] * freq[None, :]
            mask = torch.full((T, T), float("-inf")).triu(1)
            self._tables[T] = (torch.cos(ang), torch.sin(ang), mask)
        return self._tables[T]

    def forward(self, idx):
        T = idx.shape[1]
        cos, sin, mask = self.tables(T)
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.norm(x) @ self.embed.weight.t()  # tied output layer


# ---- data ----

def encode_docs(sp, path, cache):
    if os.path.exists(cache) and os.path.getmtime(cache) > os.path.getmtime(path):
        return np.fromfile(cache, dtype=np.uint16)
    docs = open(path, encoding="utf-8").read().split(DOC_SEP)
    ids = []
    for d in docs:
        ids.append(sp.bos_id())
        ids.extend(sp.encode(d))
    arr = np.array(ids, dtype=np.uint16)
    arr.tofile(cache)
    return arr


def evaluate(model, ids, window, max_tokens=0):
    """Mean NLL over consecutive windows, each scoring its tokens 1..len-1:
    the definition of `tierkv eval ppl`."""
    if max_tokens:
        ids = ids[:max_tokens]
    model.eval()
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids), window):
            w = torch.from_numpy(ids[s:s + window].astype(np.int64))
            if len(w) < 2:
                break
            logits = model(w[None, :-1])[0].double()
            nll += F.cross_entropy(logits, w[1:], reduction="sum").item()
            n += len(w) - 1
    model.train()
    return nll / n, n


def retrieval_rows(sp, rng, hay, train_ids, T, n, answer_weight, drill_share=0.0):
    """n rows of T + 1 tokens, each a retrieval sample (a drill with
    probability drill_share) right-aligned after corpus text, and their
    targets' weights (n x T)."""
    rows, weights = [], []
    for _ in range(n):
        if rng.random() < drill_share:
            ids, w = retrieval_data.encode_drill(sp, rng, T, answer_weight)
        else:
            ids, w, _ = retrieval_data.encode_sample(sp, rng, hay, T, answer_weight)
        fill = T + 1 - len(ids)
        s = rng.randrange(0, len(train_ids) - fill - 1)
        rows.append(np.concatenate([train_ids[s:s + fill].astype(np.int64), np.array(ids, dtype=np.int64)]))
        weights.append(np.concatenate([np.ones(fill, dtype=np.float32), np.array(w, dtype=np.float32)]))
    return rows, weights


def retrieval_accuracy(model, sp, hay, T, n, seed=99):
    """Share of n held-out needles (names never trained on, haystack from
    the held-out text, depths spread over 0-1) whose answer the model gives
    greedily: every answer token the argmax after the tokens before it."""
    rng = random.Random(seed)
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(n):
            ids, w, _ = retrieval_data.encode_sample(sp, rng, hay, T, 2.0, heldout=True, kind="needle",
                                                     depth=i / max(1, n - 1))
            x = torch.tensor(ids, dtype=torch.int64)
            pred = model(x[None, :-1])[0].argmax(-1)
            ans = [j for j, wj in enumerate(w) if wj != 1.0]
            right += all(int(pred[j]) == int(x[j + 1]) for j in ans)
    model.train()
    return right / n


def parse_schedule(s):
    out = []
    for part in s.split(","):
        t, f = part.split(":")
        out.append((int(t), float(f)))
    total = sum(f for _, f in out)
    return [(t, f / total) for t, f in out]


def use_huge_pages():
    """Re-executes once with glibc's transparent-huge-page malloc.

    At T >= 2048 every step allocates and frees gigabytes of attention scores;
    with 4 KiB pages the process spent most of its time in page faults (100%
    system time). glibc.malloc.hugetlb=1 measured 1,093 against 560 tokens/s
    at T=2048 (same script, back to back). The tunable is read at start-up only.
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = (tunables + ":" if tunables else "") + "glibc.malloc.hugetlb=1"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def native_bf16():
    """Whether the CPU multiplies bf16 in hardware (/proc/cpuinfo's flags)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main():
    use_huge_pages()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with train.txt and val.txt (prepare_data.py)")
    ap.add_argument("--tokenizer", required=True, help="SentencePiece .model (train_tokenizer.py)")
    ap.add_argument("--work", required=True, help="checkpoints and caches")
    ap.add_argument("--out", required=True, help="GGUF file to write at the end")
    ap.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    ap.add_argument("--schedule", default="512:0.85,2048:0.15",
                    help="sequence lengths and the share of the time spent at each, in order")
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--resume", action="store_true", help="continue from WORK/ckpt.pt if present")
    ap.add_argument("--init-gguf", help="start from these weights (fresh optimiser)")
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--eval-window", type=int, default=512)
    ap.add_argument("--eval-tokens", type=int, default=65536, help="validation tokens per evaluation")
    ap.add_argument("--name", default="tierkv-default")
    ap.add_argument("--bos-aligned", action="store_true",
                    help="start every training window at a document's BOS (as the study's and the "
                         "engine's prompts start), so that position 0 is always BOS")
    ap.add_argument("--retrieval-share", type=float, default=0.0,
                    help="share of each batch's rows that are synthetic retrieval samples (retrieval_data.py)")
    ap.add_argument("--answer-weight", type=float, default=5.0,
                    help="loss weight of a retrieval sample's answer tokens (others 1)")
    ap.add_argument("--drill-share", type=float, default=0.0,
                    help="share of the retrieval rows that are dense registry drills (retrieval_data.encode_drill)")
    ap.add_argument("--retrieval-eval", type=int, default=16,
                    help="held-out needles scored at each checkpoint (0: none)")
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="bf16 autocast (fp32 master weights) or fp32; auto: bf16 where the CPU multiplies "
                         "bf16 natively (avx512_bf16 or amx_bf16), else fp32. Measured: bf16 4.5x faster than "
                         "fp32 on an AMX CPU; 15x slower on an AVX2-only AMD EPYC, where it is emulated")
    ap.add_argument("--no-bf16", dest="precision", action="store_const", const="fp32", help="same as --precision fp32")
    a = ap.parse_args()

    a.bf16 = a.precision == "bf16" or (a.precision == "auto" and native_bf16())
    print(f"precision: {'bf16 autocast' if a.bf16 else 'fp32'} ({a.precision})", flush=True)
    torch.set_num_threads(a.threads)  # Debian's torch defaults to 1 thread
    torch.manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    c = Config(a.dim, a.hidden, a.layers, a.heads, sp.get_piece_size(), a.ctx)
    train_ids = encode_docs(sp, os.path.join(a.data, "train.txt"), os.path.join(a.work, "train.bin"))
    val_text = open(os.path.join(a.data, "val.txt"), encoding="utf-8").read()
    val_ids = np.array(sp.encode(val_text), dtype=np.int64)
    print(f"train tokens {len(train_ids)}, val tokens {len(val_ids)}, config {c.to_dict()}", flush=True)

    model = Llama(c)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    state = {"step": 0, "tokens": 0, "seconds": 0.0, "history": []}
    ckpt = os.path.join(a.work, "ckpt.pt")
    if a.resume and os.path.exists(ckpt):
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"resumed at step {state['step']}, {state['tokens']} tokens", flush=True)
    elif a.init_gguf:
        gguf_io.load_into(model, a.init_gguf)
        prev = os.path.join(os.path.dirname(a.init_gguf), "train-history.json")
        if os.path.exists(prev):
            state = json.load(open(prev))["state"]
            state["history"] = state.get("history", [])
        print(f"initialised from {a.init_gguf}", flush=True)

    rng = np.random.default_rng(a.seed + state["step"])
    rrng = random.Random(a.seed + state["step"])
    hay = retrieval_data.Haystack(open(os.path.join(a.data, "train.txt"), encoding="utf-8").read())
    hay_val = retrieval_data.Haystack(val_text)
    bos_starts = np.flatnonzero(train_ids == sp.bos_id()) if a.bos_aligned else None
    schedule = parse_schedule(a.schedule)
    budget = a.minutes * 60.0
    t0 = time.time()
    last_ckpt = t0
    session_tokens, session_steps = 0, 0
    log_every = 20

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    loss_acc, n_acc, t_log = 0.0, 0, time.time()
    ans_hit, ans_n = 0, 0
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        acc, T = 0.0, schedule[-1][0]
        for t, f in schedule:
            acc += f
            if frac < acc:
                T = t
                break
        B = max(1, a.batch_tokens // T)
        lr = a.lr * min(1.0, (session_steps + 1) / a.warmup)
        if frac > 0.8:  # decay over the last fifth of the budget
            lr *= 1.0 - (1.0 - a.min_lr_frac) * (frac - 0.8) / 0.2
        for g in opt.param_groups:
            g["lr"] = lr
        if bos_starts is not None:
            ok = bos_starts[bos_starts < len(train_ids) - T - 1]
            starts = ok[rng.integers(0, len(ok), size=B)]
        else:
            starts = rng.integers(0, len(train_ids) - T - 1, size=B)
        n_ret = int(round(B * a.retrieval_share))
        rows = [train_ids[s:s + T + 1].astype(np.int64) for s in starts[:B - n_ret]]
        weights = [np.ones(T, dtype=np.float32) for _ in rows]
        if n_ret:
            r_rows, r_w = retrieval_rows(sp, rrng, hay, train_ids, T, n_ret, a.answer_weight, a.drill_share)
            rows += r_rows
            weights += r_w
        batch = torch.from_numpy(np.stack(rows))
        wt = torch.from_numpy(np.stack(weights)).reshape(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(batch[:, :-1])
        ce = F.cross_entropy(logits.float().reshape(-1, c.vocab), batch[:, 1:].reshape(-1), reduction="none")
        loss = (ce * wt).sum() / wt.sum()
        with torch.no_grad():  # teacher-forced accuracy on the answers' tokens
            is_ans = wt != 1.0
            if bool(is_ans.any()):
                # argmax at the answers' positions only, not over every row's vocabulary
                pred = logits.detach().reshape(-1, c.vocab)[is_ans].argmax(-1)
                ans_hit += int((pred == batch[:, 1:].reshape(-1)[is_ans]).sum())
                ans_n += int(is_ans.sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += B * T
        session_steps += 1
        session_tokens += B * T
        loss_acc += loss.item()
        n_acc += 1
        if session_steps % log_every == 0:
            dt = time.time() - t_log
            print(f"step {state['step']} T={T} loss {loss_acc / n_acc:.3f} "
                  f"answer-token acc {ans_hit / max(1, ans_n):.3f} lr {lr:.2e} "
                  f"{log_every * B * T / dt:.0f} tok/s elapsed {elapsed / 60:.1f} min", flush=True)
            loss_acc, n_acc, t_log = 0.0, 0, time.time()
            ans_hit, ans_n = 0, 0
        if time.time() - last_ckpt > a.ckpt_minutes * 60:
            state["seconds"] += time.time() - last_ckpt
            last_ckpt = time.time()
            save()
            if a.retrieval_eval:
                acc_r = retrieval_accuracy(model, sp, hay_val, min(T, 1024), a.retrieval_eval)
                print(f"step {state['step']} held-out needles at {min(T, 1024)} tokens: {acc_r:.3f}", flush=True)
    state["seconds"] += time.time() - last_ckpt
    wall = time.time() - t0
    val_nll, val_n = evaluate(model, val_ids, a.eval_window, a.eval_tokens)
    tr_nll, tr_n = evaluate(model, train_ids[:a.eval_tokens].astype(np.int64), a.eval_window)
    needles = retrieval_accuracy(model, sp, hay_val, 1024, 32) if a.retrieval_eval else None
    entry = {"session_minutes": round(wall / 60, 2), "session_steps": session_steps,
             "session_tokens": session_tokens, "tokens_per_s": round(session_tokens / wall, 1),
             "schedule": a.schedule, "bos_aligned": a.bos_aligned, "lr": a.lr, "seed": a.seed, "bf16": a.bf16,
             "batch_tokens": a.batch_tokens, "retrieval_share": a.retrieval_share,
             "answer_weight": a.answer_weight, "drill_share": a.drill_share,
             "val_nll": round(val_nll, 4), "val_ppl": round(math.exp(val_nll), 3), "val_tokens": val_n,
             "train_nll": round(tr_nll, 4), "train_ppl": round(math.exp(tr_nll), 3),
             "eval_window": a.eval_window, "heldout_needles_1024": needles}
    state["history"].append(entry)
    save()
    gguf_io.export(model, c, sp, a.out, a.name)
    summary = {"config": c.to_dict(), "state": state, "last": entry}
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "train-history.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(entry), flush=True)


if __name__ == "__main__":
    main()
