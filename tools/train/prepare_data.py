#!/usr/bin/python3
"""Builds the training and validation text of the default model.

Sources (licences in models/README.md): Jane Austen's novels and the Jargon
File from ../shared/data/corpus/, WikiText-2 from ../shared/data/wikitext2/,
and Debian's `fortunes` package. No GPL text.

Each source is cut into documents (Austen: chapters; Jargon File: blocks of
~60 lines; WikiText-2: articles; fortunes: single fortunes). 5% of each
source's documents, chosen by a hash of the document's text, go to the
validation set: held out by document, never by random lines.

Writes OUT/train.txt, OUT/val.txt (documents separated by a blank line and a
form feed, so tools can split them again) and OUT/stats.json.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import sys

DOC_SEP = "\n\f\n"


def austen(path):
    text = open(path, encoding="utf-8").read()
    parts = re.split(r"\n\s*CHAPTER [IVXLC0-9]+\.?\s*\n", text)
    return [p.strip() for p in parts if len(p.strip()) > 200]


def jargon(path, lines_per_doc=60):
    lines = open(path, encoding="utf-8").read().split("\n")
    docs = []
    for i in range(0, len(lines), lines_per_doc):
        d = "\n".join(lines[i:i + lines_per_doc]).strip()
        if len(d) > 200:
            docs.append(d)
    return docs


def wikitext(paths):
    docs = []
    for path in paths:
        cur = []
        for line in open(path, encoding="utf-8"):
            if re.match(r"^ = [^=].* = $", line.rstrip("\n")) and cur:
                docs.append("".join(cur).strip())
                cur = []
            cur.append(line)
        if cur:
            docs.append("".join(cur).strip())
    return [d for d in docs if len(d) > 200]


def fortunes(folder):
    docs = []
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        if path.endswith((".dat", ".u8")) or os.path.islink(path) or os.path.isdir(path):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            text = open(path, encoding="latin-1").read()
        docs += [f.strip() for f in text.split("\n%\n") if f.strip()]
    return docs


def held_out(doc, fraction):
    h = int.from_bytes(hashlib.sha256(doc.encode("utf-8")).digest()[:8], "little")
    return (h % 10000) < fraction * 10000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../../shared"))
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--max-bytes", type=int, default=0, help="cap each source (smoke runs)")
    a = ap.parse_args()

    data = os.path.join(a.shared, "data")
    sources = {
        "austen": austen(os.path.join(data, "corpus/austen.txt")),
        "jargon": jargon(os.path.join(data, "corpus/jargon.txt")),
        "wikitext2": wikitext([os.path.join(data, "wikitext2/test.txt"),
                               os.path.join(data, "wikitext2/valid.txt")]),
    }
    if os.path.isdir(a.fortunes):
        sources["fortunes"] = fortunes(a.fortunes)
    else:
        print(f"note: {a.fortunes} missing (apt-get install fortunes); skipping that source",
              file=sys.stderr)
    os.makedirs(a.out, exist_ok=True)
    train, val, stats = [], [], {}
    for name, docs in sources.items():
        if a.max_bytes:
            kept, size = [], 0
            for d in docs:
                if size >= a.max_bytes:
                    break
                kept.append(d)
                size += len(d)
            docs = kept
        t = [d for d in docs if not held_out(d, a.val_fraction)]
        v = [d for d in docs if held_out(d, a.val_fraction)]
        train += t
        val += v
        stats[name] = {"documents": len(docs), "train_docs": len(t), "val_docs": len(v),
                       "train_bytes": sum(map(len, t)), "val_bytes": sum(map(len, v))}
    with open(os.path.join(a.out, "train.txt"), "w", encoding="utf-8") as f:
        f.write(DOC_SEP.join(train))
    with open(os.path.join(a.out, "val.txt"), "w", encoding="utf-8") as f:
        f.write(DOC_SEP.join(val))
    with open(os.path.join(a.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
