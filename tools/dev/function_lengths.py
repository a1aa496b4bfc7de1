#!/usr/bin/env python3
"""Lengths of C++ function bodies, longest first: the check behind the
style rule "no function over ~80 lines in the core".

  python3 tools/dev/function_lengths.py src/engine src/store --top 5
  python3 tools/dev/function_lengths.py src/engine src/store --max 80   # exit 1 if any is longer

A function's length counts the lines from its signature's first line to its
closing brace. Parsing is lexical (comments and string literals skipped,
braces matched): a definition is a brace block, outside any other function,
whose header has a parameter list and is not a class, namespace, enum,
initializer or control statement. Lambdas count toward their function.
"""
import argparse
import os
import re
import sys

NOT_FUNCTION = re.compile(r"\b(class|struct|union|namespace|enum)\b[^()]*$|=\s*$|^\s*(if|for|while|switch|catch|do|else)\b")


def strip(text):
    """Comments and literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path):
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    depth, func_depth, start, header_from = 0, None, 0, 0
    results = []
    for i, c in enumerate(text):
        if c == "{":
            header = text[header_from:i]
            if func_depth is None and "(" in header and not NOT_FUNCTION.search(header.strip()):
                name = re.findall(r"([~\w:]+)\s*\(", header)
                first = header_from + len(header) - len(header.lstrip())
                func_depth, start = depth, text.count("\n", 0, first) + 1
                current = name[0] if name else "?"
            depth += 1
            header_from = i + 1
        elif c == "}":
            depth -= 1
            if func_depth is not None and depth == func_depth:
                end = text.count("\n", 0, i) + 1
                results.append((end - start + 1, current, path, start))
                func_depth = None
            header_from = i + 1
        elif c == ";":
            header_from = i + 1
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--top", type=int, default=5, help="print this many of each path (0: all)")
    ap.add_argument("--max", type=int, default=0, help="exit 1 if a function is longer")
    args = ap.parse_args()
    worst = 0
    for root in args.paths:
        found = []
        files = [root] if os.path.isfile(root) else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith((".cc", ".h"))]
        for f in sorted(files):
            found += functions(f)
        found.sort(reverse=True)
        print(f"{root}: {len(found)} functions, longest:")
        for n, name, path, line in found[: args.top or None]:
            print(f"  {n:4d}  {name}  ({path}:{line})")
        worst = max([worst] + [n for n, *_ in found])
    if args.max and worst > args.max:
        print(f"a function has {worst} lines, over {args.max}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
