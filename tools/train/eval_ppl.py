#!/usr/bin/python3
"""Perplexity of a GGUF model (written by train.py) on a text file, computed
by PyTorch exactly as `tierkv eval ppl` defines it; prints JSON. Used to check
the engine's numerics on this MHA model."""
import argparse
import json
import math
import os
import sys

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_io  # noqa: E402
from train import Config, Llama, evaluate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(2)
    meta, _ = gguf_io.read(a.model)
    c = Config(meta["llama.embedding_length"], meta["llama.feed_forward_length"],
               meta["llama.block_count"], meta["llama.attention.head_count"],
               len(meta["tokenizer.ggml.tokens"]), meta["llama.context_length"])
    model = Llama(c)
    gguf_io.load_into(model, a.model)
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    ids = np.array(sp.encode(open(a.text, encoding="utf-8").read()), dtype=np.int64)
    nll, n = evaluate(model, ids, a.window, a.max_tokens)
    print(json.dumps({"tokens_scored": n, "mean_nll": nll, "perplexity": math.exp(nll)}))


if __name__ == "__main__":
    main()
