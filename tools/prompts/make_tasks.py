#!/usr/bin/env python3
"""Request files for `tierkv bench` (and `check`, `compare`): JSON Lines in
the schema of docs/workloads.md, built from ../shared/data (never copied
into the repository).

  fewshot  few-shot tasks, the papers' setup: each prefix is 2-10 (--shots)
           answered examples of a task, shared by several questions (how
           many: drawn from a normal distribution, --reuse-mean/--reuse-sd);
           a question carries its choices, scored by log-likelihood.
           --task piqa (labelled: PIQA's validation labels), copa or
           openbookqa (the shared lm-eval requests; no gold labels: accuracy
           is agreement with recompute), or mixed. --min-prefix-chars adds
           examples until a prefix is that long (about 3.4 characters make
           a token of the default model: 8000 gives ~2,300-token prefixes)
  docqa    LMCache's long-document QA shape: --documents windows of a corpus
           text, each asked --questions questions in --order random, tiled
           (a document's questions together) or interleaved (round robin);
           a question quotes a sentence of the document and offers two
           continuations, the one that follows it there (the label) and one
           from elsewhere in the document
  chat     multi-round chat: --users conversations of --rounds turns (the
           ShareGPT-schema file's human and gpt turns) after a shared system
           prompt of --system-chars; each turn's prefix is the conversation
           so far, its query the next human turn

  suite    the workloads of `tierkv bench --suite`: fewshot.jsonl, docqa.jsonl
           and chat.jsonl in --out, at --size quick (CI's: prefixes of
           ~400-600 tokens, a few requests each) or paper (prefixes of
           2,000-2,600 tokens, the papers' scale for this model)

  python3 tools/prompts/make_tasks.py fewshot --task piqa --requests 40 > piqa.jsonl
  python3 tools/prompts/make_tasks.py suite --size quick --out build/workloads/quick
"""
import argparse
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:
                    sys.exit(f"{path}:{n}: not JSON ({e})")


def piqa(shared):
    """(examples, questions): an example is answered text; a question is
    (query, choices, label)."""
    d = os.path.join(shared, "data", "piqa")
    items = list(read_jsonl(os.path.join(d, "valid.jsonl")))
    with open(os.path.join(d, "valid-labels.lst")) as f:
        labels = [int(x) for x in f.read().split()]
    if len(labels) != len(items):
        sys.exit(f"{d}: {len(items)} items but {len(labels)} labels")
    examples, questions = [], []
    for i, (it, lab) in enumerate(zip(items, labels)):
        sols = [it["sol1"].strip(), it["sol2"].strip()]
        if not it["goal"].strip() or not all(sols):
            continue
        if i % 2 == 0:  # half the items are examples, half questions: none is both
            examples.append(f"Question: {it['goal'].strip()}\nAnswer: {sols[lab]}")
        else:
            questions.append((f"Question: {it['goal'].strip()}\nAnswer:", [" " + s for s in sols], lab))
    return examples, questions


def lm_eval_task(shared, name):
    """COPA or OpenBookQA from the lm-eval requests: consecutive lines that
    share their examples and differ in the ending are one question."""
    path = os.path.join(shared, "data", "fewshot", name)
    examples, questions, group = set(), [], []

    def flush():
        if len(group) < 2:
            return
        ends = [g[1] for g in group]
        stem = os.path.commonprefix(ends)
        stem = stem[: stem.rfind(" ") + 1] if " " in stem else ""
        choices = [e[len(stem):] for e in ends]
        if stem.strip() and all(c.strip() for c in choices) and len(set(choices)) == len(choices):
            questions.append((stem.rstrip(), [" " + c.strip() for c in choices], -1))

    for j in read_jsonl(path):
        parts = [p for p in j.get("prompt", "").split("\n\n") if p.strip()]
        if len(parts) < 2:
            continue
        examples.update(parts[:-1])
        shots = "\n\n".join(parts[:-1])
        if group and group[0][0] != shots:
            flush()
            group = []
        group.append((shots, parts[-1]))
    flush()
    return sorted(examples), questions


def fewshot(a, rng):
    tasks = ["piqa", "copa", "openbookqa"] if a.task == "mixed" else [a.task]
    data = {}
    for t in tasks:
        data[t] = piqa(a.shared) if t == "piqa" else lm_eval_task(a.shared, t + "-5.jsonl")
        if not data[t][0] or not data[t][1]:
            sys.exit(f"task {t}: no examples or questions found")
    qnext = {t: 0 for t in tasks}
    out, p, n = [], 0, 0
    while n < a.requests:
        t = tasks[p % len(tasks)]
        examples, questions = data[t]
        shots = rng.sample(examples, min(len(examples), rng.randint(a.shots_min, a.shots_max)))
        while sum(len(s) + 2 for s in shots) < a.min_prefix_chars and len(shots) < len(examples):
            shots.append(rng.choice(examples))
        doc = f"{t}-prefix-{p}"
        out.append({"document": doc, "text": "\n\n".join(shots) + "\n\n"})
        reuse = max(1, round(rng.gauss(a.reuse_mean, a.reuse_sd)))
        for _ in range(min(reuse, a.requests - n)):
            n += 1
            q, choices, label = questions[qnext[t] % len(questions)]
            qnext[t] += 1
            r = {"id": f"{t}-{qnext[t]}", "task": t, "prefix_doc": doc, "query": q, "choices": choices}
            if label >= 0:
                r["label"] = label
            out.append(r)
        p += 1
    docs = [r for r in out if "document" in r]
    reqs = [r for r in out if "query" in r]
    rng.shuffle(reqs)  # prefixes recur at random, as users' requests do
    return docs + reqs


def sentences(text):
    s = [x.strip().replace("\n", " ") for x in re.split(r"(?<=[.!?])\s+", text)]
    return [x for x in s if 30 <= len(x) <= 200]


def docqa(a, rng):
    with open(os.path.join(a.shared, "data", "corpus", "austen.txt"), encoding="utf-8") as f:
        text = f.read()
    out, asked = [], []
    step = len(text) // (a.documents + 1)
    for d in range(a.documents):
        start = text.find("\n\n", (d + 1) * step - a.doc_chars // 2) + 2
        body = text[start:start + a.doc_chars]
        sent = sentences(body)
        if len(sent) < 4:
            sys.exit(f"document {d}: too few sentences; raise --doc-chars")
        doc = f"doc-{d}"
        out.append({"document": doc, "text": body})
        qs = []
        for k in range(a.questions):
            i = rng.randrange(len(sent) - 1)
            wrong = rng.choice([s for j, s in enumerate(sent) if j not in (i, i + 1)])
            choices = [" " + sent[i + 1], " " + wrong]
            label = rng.randrange(2)
            if label == 1:
                choices.reverse()
            qs.append({"id": f"{doc}-q{k}", "task": "docqa", "prefix_doc": doc,
                       "query": f"\n\nIn the text above, the sentence \"{sent[i]}\" is followed by:",
                       "choices": choices, "label": label})
        asked.append(qs)
    if a.order == "tiled":
        reqs = [q for qs in asked for q in qs]
    elif a.order == "interleaved":
        reqs = [qs[k] for k in range(a.questions) for qs in asked]
    else:
        reqs = [q for qs in asked for q in qs]
        rng.shuffle(reqs)
    return out + reqs


def chat(a, rng):
    with open(os.path.join(a.shared, "data", "sharegpt", "dummy_conversation.json"), encoding="utf-8") as f:
        convs = json.load(f)
    with open(os.path.join(a.shared, "data", "corpus", "jargon.txt"), encoding="utf-8") as f:
        jargon = f.read()
    start = jargon.find("\n\n", len(jargon) // 3) + 2
    system = "You answer questions about this text.\n\n" + jargon[start:start + a.system_chars]
    pairs = []
    for c in convs:
        msgs = c.get("conversations", [])
        for h, g in zip(msgs[::2], msgs[1::2]):
            if h.get("from") == "human" and g.get("from") == "gpt" and h["value"].strip() and g["value"].strip():
                pairs.append((h["value"].strip()[:400], g["value"].strip()[:600]))
    if not pairs:
        sys.exit("no human/gpt turns in the ShareGPT file")
    out = [{"document": "system", "text": system}]
    for u in range(a.users):
        history = ""
        for t in range(a.rounds):
            h, g = pairs[(u * a.rounds + t) % len(pairs)]
            r = {"id": f"user{u}-turn{t}", "task": "chat", "query": f"\nUser: {h}\nAssistant:"}
            if history:
                r["prefix"] = system + history
            else:
                r["prefix_doc"] = "system"
            out.append(r)
            history += f"\nUser: {h}\nAssistant: {g}\n"
    return out


# The suite's workloads: kind and flags per file, per size.
SUITE = {
    "quick": {
        "fewshot": ["fewshot", "--task", "mixed", "--requests", "12", "--min-prefix-chars", "1500"],
        "docqa": ["docqa", "--documents", "2", "--questions", "3", "--doc-chars", "2000"],
        "chat": ["chat", "--users", "2", "--rounds", "3", "--system-chars", "1500"],
    },
    "paper": {
        "fewshot": ["fewshot", "--task", "mixed", "--requests", "60", "--min-prefix-chars", "8000"],
        "docqa": ["docqa", "--documents", "4", "--questions", "10", "--doc-chars", "8500", "--order", "random"],
        "chat": ["chat", "--users", "8", "--rounds", "4", "--system-chars", "7500"],
    },
}


def write_suite(a):
    os.makedirs(a.out, exist_ok=True)
    for name, argv in SUITE[a.size].items():
        sub = parse(argv + ["--shared", a.shared, "--seed", str(a.seed)])
        lines = KINDS[sub.kind](sub, random.Random(a.seed))
        with open(os.path.join(a.out, name + ".jsonl"), "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        print(f"wrote {os.path.join(a.out, name + '.jsonl')}: {sum(1 for x in lines if 'query' in x)} requests",
              file=sys.stderr)


KINDS = {"fewshot": fewshot, "docqa": docqa, "chat": chat}


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["fewshot", "docqa", "chat", "suite"])
    ap.add_argument("--size", choices=["quick", "paper"], default="quick", help="suite: the workloads' size")
    ap.add_argument("--out", help="suite: the directory to write to")
    ap.add_argument("--shared", default=SHARED, help="the shared folder (default: ../shared)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--task", choices=["piqa", "copa", "openbookqa", "mixed"], default="mixed")
    ap.add_argument("--requests", type=int, default=40, help="fewshot: questions")
    ap.add_argument("--shots-min", type=int, default=2)
    ap.add_argument("--shots-max", type=int, default=10)
    ap.add_argument("--min-prefix-chars", type=int, default=0)
    ap.add_argument("--reuse-mean", type=float, default=4.0)
    ap.add_argument("--reuse-sd", type=float, default=2.0)
    ap.add_argument("--documents", type=int, default=4)
    ap.add_argument("--questions", type=int, default=8, help="docqa: per document")
    ap.add_argument("--doc-chars", type=int, default=8000)
    ap.add_argument("--order", choices=["random", "tiled", "interleaved"], default="random")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--system-chars", type=int, default=4000)
    a = ap.parse_args(argv)
    for name in ("requests", "shots_min", "shots_max", "documents", "questions", "doc_chars", "users", "rounds"):
        if getattr(a, name) < 1:
            sys.exit(f"--{name.replace('_', '-')} must be at least 1")
    if a.shots_min > a.shots_max:
        sys.exit("--shots-min must not exceed --shots-max")
    if not os.path.isdir(os.path.join(a.shared, "data")):
        sys.exit(f"{a.shared}/data not found: this tool needs ../shared (or --shared DIR)")
    if a.kind == "suite" and not a.out:
        sys.exit("suite: --out DIR is required")
    return a


def main():
    a = parse(sys.argv[1:])
    if a.kind == "suite":
        write_suite(a)
        return
    for line in KINDS[a.kind](a, random.Random(a.seed)):
        print(json.dumps(line, ensure_ascii=False))


if __name__ == "__main__":
    main()
