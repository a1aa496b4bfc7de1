#!/usr/bin/python3
"""Renders a Jinja chat template as Hugging Face transformers does (the
reference the chat template tests compare tierkv's renderers with).

Reads one JSON object on stdin: {"template": source, "messages": [...],
"bos_token": str, "eos_token": str, "date": "26 Jul 2024"}; prints
{"text": rendered} or {"error": message} as JSON. transformers' environment:
a sandbox with trim_blocks and lstrip_blocks, raise_exception, strftime_now
(here the given date, so that the output does not depend on the day) and
add_generation_prompt set.
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def main():
    req = json.load(sys.stdin)

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: req["date"]
    try:
        text = env.from_string(req["template"]).render(
            messages=req["messages"], bos_token=req["bos_token"], eos_token=req["eos_token"],
            add_generation_prompt=True)
    except TemplateError as e:
        json.dump({"error": str(e)}, sys.stdout)
        return
    json.dump({"text": text}, sys.stdout)


if __name__ == "__main__":
    main()
