#!/usr/bin/env python3
"""Prompt files for `tierkv check` and `tierkv compare`: JSON Lines of
{"prefix": ..., "query": ...} built from ../shared/data (never copied into
the repository).

  fewshot  a prefix is the examples of consecutive few-shot prompts of
           ../shared/data/fewshot/*.jsonl (COPA, OpenBookQA) joined until it
           reaches --prefix-chars; the query is the next prompt's last line
  corpus   a prefix is a window of --prefix-chars of a corpus text (Austen,
           the Jargon File); the query is the text that follows it
  mixed    requests alternate between the two

About 3.4 characters make one token of the default model's vocabulary:
--prefix-chars 9000 gives prefixes of about 2,600 tokens.

  python3 tools/prompts/make_prompts.py --source mixed --requests 50 > /tmp/p.jsonl
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def fewshot_prompts(shared):
    out = []
    for name in ("copa-5.jsonl", "openbookqa-5.jsonl"):
        path = os.path.join(shared, "data", "fewshot", name)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    prompt = json.loads(line)["prompt"]
                except (ValueError, KeyError) as e:
                    sys.exit(f"{path}:{n}: no 'prompt' field ({e})")
                parts = [p for p in prompt.split("\n\n") if p.strip()]
                if len(parts) >= 2:
                    out.append(parts)
    return out


def fewshot(shared, requests, chars):
    prompts = fewshot_prompts(shared)
    i = 0
    for _ in range(requests):
        shots = []
        while sum(len(s) + 2 for s in shots) < chars:
            shots.extend(prompts[i % len(prompts)][:-1])
            i += 1
        query = prompts[i % len(prompts)][-1]
        i += 1
        yield {"prefix": "\n\n".join(shots) + "\n\n", "query": query}


def corpus(shared, requests, chars, query_chars=240):
    texts = []
    for name in ("austen.txt", "jargon.txt"):
        with open(os.path.join(shared, "data", "corpus", name), encoding="utf-8") as f:
            texts.append(f.read())
    for r in range(requests):
        t = texts[r % len(texts)]
        # Spread the windows over the text; start at a paragraph.
        start = (r // len(texts) + 1) * (len(t) // (requests // len(texts) + 2))
        start = t.find("\n\n", start) + 2
        yield {"prefix": t[start:start + chars], "query": t[start + chars:start + chars + query_chars]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("fewshot", "corpus", "mixed"), default="mixed")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--prefix-chars", type=int, default=9000)
    ap.add_argument("--shared", default=SHARED, help="the shared folder (default: ../shared)")
    a = ap.parse_args()
    if a.requests < 1 or a.prefix_chars < 1:
        sys.exit("--requests and --prefix-chars must be positive")
    if not os.path.isdir(os.path.join(a.shared, "data")):
        sys.exit(f"{a.shared}/data not found: this tool needs ../shared (or --shared DIR)")
    if a.source == "fewshot":
        reqs = fewshot(a.shared, a.requests, a.prefix_chars)
    elif a.source == "corpus":
        reqs = corpus(a.shared, a.requests, a.prefix_chars)
    else:
        f = fewshot(a.shared, (a.requests + 1) // 2, a.prefix_chars)
        c = corpus(a.shared, a.requests // 2, a.prefix_chars)
        reqs = (x for pair in zip(f, c) for x in pair)
        reqs = list(reqs)
        if a.requests % 2:
            reqs.append(next(f))
    for r in reqs:
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
