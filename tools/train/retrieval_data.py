#!/usr/bin/python3
"""Synthetic retrieval documents made from corpus text (issue #36): what the
default model trains on to learn to read its context, and what the held-out
evaluation asks.

A sample is haystack text (consecutive documents of the corpus, cut at line
starts) with facts inserted at chosen depths and a question at the end whose
answer is only in the context:

  needle    "The special magic number for <name> is <5 digits>." at one depth;
            asked: "What is the special magic number for <name>? The special
            magic number for <name> is" -> " <digits>."
  multikey  2-4 such needles with different names at different depths, one asked
  kv        a block of 2-12 "- <name>: <digits>" lines at one depth, one asked
  copy      a sentence of the haystack quoted at the end; the answer is the
            sentence that follows it there (docqa's shape)

Names are made of syllables; a name belongs to the held-out set when a hash of
it is 0 mod 8 (training never draws one; evaluation draws only those), and
the evaluation's haystacks come from the held-out text (val.txt). Numbers are
uniform in 10000-99999.
"""
import random
import re
import zlib

SYLLABLES = ("ka lo ri ta mu ne so vi da pe zu ha ki mo ra li fe no gu be "
             "sa to wi ja ce du le xo ny qua bri sten mar del fin gor").split()
KINDS = (("needle", 0.4), ("multikey", 0.3), ("kv", 0.15), ("copy", 0.15))


def held_out(name):
    return zlib.crc32(name.encode()) % 8 == 0


def make_name(rng, heldout):
    while True:
        n = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if held_out(n) == heldout:
            return n


def make_names(rng, k, heldout):
    names = []
    while len(names) < k:
        n = make_name(rng, heldout)
        if n not in names:
            names.append(n)
    return names


def number(rng):
    return str(rng.randint(10000, 99999))


class Haystack:
    """Consecutive text of a corpus (documents joined by blank lines)."""

    def __init__(self, text, sep="\n\f\n"):
        self.text = "\n\n".join(d.strip() for d in text.split(sep) if d.strip())
        # Candidate starts: line starts, so a haystack never begins mid-word.
        self.starts = [0] + [m.end() for m in re.finditer("\n", self.text)]

    def take(self, rng, n_chars):
        s = rng.choice(self.starts[: max(1, len(self.starts) - 1)])
        s = min(s, max(0, len(self.text) - n_chars))
        return self.text[s:s + n_chars]


def insert_at(text, depth, fact):
    """Inserts `fact` as a sentence at fraction `depth` of `text`, at the next
    sentence or line end (or the end)."""
    pos = int(len(text) * depth)
    ends = [text.find(m, pos) for m in (". ", ".\n", "\n")]
    ends = [e for e in ends if e >= 0]
    if depth >= 1.0 or not ends:
        return text.rstrip() + " " + fact + "\n", len(text)
    e = min(ends) + 1
    return text[:e] + " " + fact + " " + text[e:].lstrip(" "), e


def needle_fact(name, num):
    return f"The special magic number for {name} is {num}."


def needle_question(name):
    return f"\nWhat is the special magic number for {name}? The special magic number for {name} is"


def sample(rng, hay, n_chars, kind=None, depth=None, heldout=False):
    """(prompt, answer, info): prompt ends where the answer starts (the answer
    begins with a space)."""
    if kind is None:
        r, acc = rng.random(), 0.0
        for kind, p in KINDS:
            acc += p
            if r < acc:
                break
    text = hay.take(rng, n_chars)
    info = {"kind": kind}
    if kind == "needle":
        name, num = make_name(rng, heldout), number(rng)
        d = rng.random() if depth is None else depth
        text, _ = insert_at(text, d, needle_fact(name, num))
        info.update(depth=d, name=name)
        return text + needle_question(name), f" {num}.", info
    if kind == "multikey":
        k = rng.randint(2, 4)
        names = make_names(rng, k, heldout)
        nums = [number(rng) for _ in names]
        depths = sorted(rng.random() for _ in names)
        asked = rng.randrange(k)
        if depth is not None:
            depths[asked] = depth
        # Insert deepest first so earlier positions do not shift.
        for i in sorted(range(k), key=lambda i: -depths[i]):
            text, _ = insert_at(text, depths[i], needle_fact(names[i], nums[i]))
        info.update(depth=depths[asked], keys=k, name=names[asked])
        return text + needle_question(names[asked]), f" {nums[asked]}.", info
    if kind == "kv":
        k = rng.randint(2, max(2, min(12, n_chars // 150)))  # the block stays a small part
        names = make_names(rng, k, heldout)
        nums = [number(rng) for _ in names]
        block = "Registry:\n" + "\n".join(f"- {n}: {v}" for n, v in zip(names, nums))
        d = rng.random() if depth is None else depth
        text, _ = insert_at(text, d, "\n" + block + "\n")
        asked = rng.randrange(k)
        info.update(depth=d, keys=k, name=names[asked])
        return text + f"\nIn the registry, {names[asked]}:", f" {nums[asked]}", info
    # copy: a sentence of the haystack, then the one after it.
    sents = [s.strip() for s in text.replace("\n", " ").split(". ") if len(s.strip()) > 20]
    if len(sents) < 3:
        return sample(rng, hay, n_chars, "needle", depth, heldout)
    i = rng.randrange(len(sents) - 1) if depth is None else min(len(sents) - 2, int(depth * (len(sents) - 1)))
    info.update(depth=i / max(1, len(sents) - 1))
    return text + f'\nIn the text above, "{sents[i]}." is followed by "', sents[i + 1][:120] + '."', info


def encode_sample(sp, rng, hay, T, answer_weight, heldout=False, kind=None, depth=None):
    """Token ids (BOS, prompt, answer: at most T + 1) and per-target weights
    (answer tokens `answer_weight`, others 1), sized to fill T + 1 tokens
    at about the corpus's characters per token."""
    n_chars = max(200, int((T - 60) * 3.2))
    for attempt in range(12):
        if attempt == 8:  # facts longer than T at any haystack: a single needle
            kind, n_chars = "needle", 100
        prompt, answer, info = sample(rng, hay, n_chars, kind, depth, heldout)
        p = sp.encode(prompt)
        # The whole text as the engine will tokenize it; the answer's tokens
        # are those past the prompt's own (the answer starts at a space).
        ids = [sp.bos_id()] + sp.encode(prompt + answer)
        if len(ids) <= T + 1:
            w = [1.0] * (len(ids) - 1)
            for j in range(len(p), len(ids) - 1):  # targets ids[len(p)+1:]: the answer's tokens
                w[j] = answer_weight
            return ids, w, info
        n_chars = int(n_chars * 0.9 * (T + 1) / len(ids))
    raise RuntimeError("retrieval sample does not fit %d tokens" % T)


def encode_drill(sp, rng, T, answer_weight, heldout=False):
    """A dense retrieval drill: a short haystack-free registry of 4-16
    "- <name>: <digits>" lines, then as many questions as fit, each
    "In the registry, <name>:" -> " <digits>", every answer weighted.

    Why: in the haystack samples one 6-token answer is supervised per row,
    so a model that has not yet learned to look back barely sees the
    signal; a drill gives every row dozens of lookups (the copying circuit
    forms on these first, then the haystack kinds teach it at depth).
    Returns (ids, weights) like encode_sample."""
    k = rng.randint(4, 16)
    names = make_names(rng, k, heldout)
    nums = [number(rng) for _ in names]
    # "- " before each name: at a line start SentencePiece would split
    # "Kabri" as K|ab|ri, in the question as ▁K|ab|ri; a lookup needs the
    # same tokens in both places.
    text = "Registry:\n" + "\n".join(f"- {n}: {v}" for n, v in zip(names, nums)) + "\n"
    spans = []
    while True:
        i = rng.randrange(k)
        q = text + f"In the registry, {names[i]}:"
        a = q + f" {nums[i]}\n"
        if len(sp.encode(a)) + 1 > T + 1:
            break
        spans.append((len(sp.encode(q)), len(sp.encode(a.rstrip("\n")))))
        text = a
    ids = [sp.bos_id()] + sp.encode(text)
    w = [1.0] * (len(ids) - 1)
    for b, e in spans:  # targets ids[b+1 : e+1] are the answer's tokens
        for j in range(b, e):
            w[j] = answer_weight
    return ids, w


if __name__ == "__main__":
    import sys
    rng = random.Random(1)
    hay = Haystack(open(sys.argv[1], encoding="utf-8").read())
    for kind, _ in KINDS:
        p, a, info = sample(rng, hay, 600, kind)
        print(info, "\n", p[-400:], "|", a, "\n----")
