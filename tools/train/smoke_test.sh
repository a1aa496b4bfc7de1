#!/usr/bin/env bash
# CI's one-minute check of the training tool: prepare a small data set, train
# a tokenizer and a tiny model for 45 seconds (a quarter of its rows synthetic
# retrieval samples), export GGUF, and require that
# tierkv's engine and PyTorch compute the same perplexity on held-out text
# (within 1%) over the same number of tokens.
# Usage: smoke_test.sh TIERKV_BINARY SHARED_DIR. Exit 77 (skip) without torch.
set -euo pipefail
tierkv=$1
shared=$2
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! $py -c "import torch, sentencepiece" 2>/dev/null; then
  echo "SKIP: needs Debian's python3-torch and python3-sentencepiece (tools/train/setup.sh)"
  exit 77
fi
if [ ! -f "$shared/data/corpus/austen.txt" ]; then
  echo "SKIP: needs $shared/data (CI has it; a fresh clone without ../shared skips this test)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$py "$here/prepare_data.py" --shared "$shared" --out "$work/data" --max-bytes 300000 >/dev/null
$py "$here/train_tokenizer.py" --data "$work/data" --vocab 512 --out "$work/tok" >/dev/null
$py "$here/train.py" --data "$work/data" --tokenizer "$work/tok.model" --work "$work/w" \
  --out "$work/smoke.gguf" --minutes 0.75 --dim 64 --hidden 128 --layers 2 --heads 4 --ctx 256 \
  --schedule 128:1 --batch-tokens 2048 --eval-window 128 --eval-tokens 8192 \
  --retrieval-share 0.25 --retrieval-eval 2 | tail -1
head -c 40000 "$work/data/val.txt" > "$work/val.txt"
$py "$here/eval_ppl.py" --model "$work/smoke.gguf" --tokenizer "$work/tok.model" \
  --text "$work/val.txt" --window 128 > "$work/py.json"
"$tierkv" eval ppl --model "$work/smoke.gguf" --text "$work/val.txt" --window 128 --json \
  > "$work/cpp.json" 2>/dev/null
echo "pytorch: $(cat "$work/py.json")"
echo "tierkv:  $(cat "$work/cpp.json")"
$py - "$work/py.json" "$work/cpp.json" <<'PY'
import json, sys
p, c = (json.load(open(f)) for f in sys.argv[1:3])
assert p["tokens_scored"] == c["tokens_scored"], "token counts differ: tokenizers disagree"
rel = abs(p["perplexity"] - c["perplexity"]) / p["perplexity"]
print(f"relative perplexity difference {rel:.2e}")
assert rel < 0.01, "engine and PyTorch disagree"
PY
