#!/usr/bin/env python3
"""Workloads for `tierkv bench-serve`: JSON Lines, one session per line
(include/tierkv/tools/serve_bench.h), built from ../shared/data (never copied into
the repository).

  chat       multi-round chat in the shape of LMCache's multi-round QA
             benchmark: --users sessions of --rounds turns each, one shared
             system prompt (--system-chars of a corpus text), the users'
             turns taken from the ShareGPT-schema conversations; the server's
             answers join the history, so each turn's prompt begins with the
             previous turn's
  documents  each session is a document (--system-chars of a corpus text, a
             different window per session) and --rounds questions about it

  python3 tools/prompts/make_workload.py --kind chat --users 16 --rounds 6 > /tmp/chat.jsonl
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def human_turns(shared):
    path = os.path.join(shared, "data", "sharegpt", "dummy_conversation.json")
    with open(path, encoding="utf-8") as f:
        convs = json.load(f)
    turns = []
    for c in convs:
        for m in c.get("conversations", []):
            v = m.get("value", "").strip()
            if m.get("from") == "human" and 0 < len(v) <= 400:
                turns.append(v)
    if not turns:
        sys.exit(f"{path}: no human turns")
    return turns


def corpus_text(shared, name="austen.txt"):
    with open(os.path.join(shared, "data", "corpus", name), encoding="utf-8") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=["chat", "documents"], default="chat")
    ap.add_argument("--users", type=int, default=16, help="sessions")
    ap.add_argument("--rounds", type=int, default=6, help="turns per session")
    ap.add_argument("--system-chars", type=int, default=4000,
                    help="characters of the shared system prompt or of each document (~3.4 per token)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per answer")
    ap.add_argument("--shared", default=SHARED, help="the shared folder (default: ../shared beside the repository)")
    a = ap.parse_args()
    if a.users < 1 or a.rounds < 1 or a.system_chars < 1 or a.max_tokens < 1:
        sys.exit("--users, --rounds, --system-chars and --max-tokens must be positive")
    if not os.path.isdir(os.path.join(a.shared, "data")):
        sys.exit(f"{a.shared}/data: not found; give --shared")
    turns = human_turns(a.shared)
    text = corpus_text(a.shared)
    t = 0
    for u in range(a.users):
        mine = [turns[(t + i) % len(turns)] for i in range(a.rounds)]
        t += a.rounds
        if a.kind == "chat":
            system = "You are a helpful storyteller. Here is the story we talk about:\n\n" + text[:a.system_chars]
            line = {"system": system, "turns": mine, "max_tokens": a.max_tokens}
        else:
            start = (u * 7919 * a.system_chars) % max(1, len(text) - a.system_chars)
            line = {"prefix": text[start:start + a.system_chars] + "\n\nQuestion: ",
                    "turns": [q + "\nAnswer:" for q in mine], "max_tokens": a.max_tokens}
        print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
