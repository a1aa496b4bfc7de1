"""The official OpenAI Python client against a tierkv server, for the
server's black-box tests. Run it with the project's Python
(tools/llamacpp/setup.sh installs the pinned openai package):

  tools/llamacpp/llamacpp python tools/openai/client.py BASE_URL KEY COMMAND JSON

COMMAND: completion | chat (the request JSON; "stream": true streams),
retrieve (JSON: {"id": ...}). KEY "-": no API key. Prints one JSON line:
{"ok": true, "result": ...} or {"ok": false, "kind": <the client's error
class>, "status": <HTTP status or null>, "message": ...}; a stream's result
is {"text", "chunks", "finish_reason", "usage"}.
"""
import inspect
import json
import sys

import openai


def create(api, req):
    """api.create with the request's fields: those the client names as
    parameters passed as such, the server's own (ignore_eos, cache_salt,
    ...) in extra_body, as a user of the client sends them."""
    known = set(inspect.signature(api.create).parameters)
    args = {k: v for k, v in req.items() if k in known}
    extra = {k: v for k, v in req.items() if k not in known}
    if extra:
        args["extra_body"] = extra
    return api.create(**args)


def run(client, command, req):
    if command == "retrieve":
        return client.models.retrieve(req["id"]).model_dump()
    api = client.chat.completions if command == "chat" else client.completions
    if not req.get("stream"):
        return create(api, req).model_dump()
    out = {"text": "", "chunks": 0, "finish_reason": None, "usage": None}
    for chunk in create(api, req):
        out["chunks"] += 1
        if chunk.usage is not None:
            out["usage"] = chunk.usage.model_dump()
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        out["text"] += (c.delta.content or "") if command == "chat" else (c.text or "")
        if c.finish_reason:
            out["finish_reason"] = c.finish_reason
    return out


def main():
    if len(sys.argv) != 5 or sys.argv[3] not in ("completion", "chat", "retrieve"):
        sys.stderr.write("usage: client.py BASE_URL KEY completion|chat|retrieve JSON\n")
        sys.exit(2)
    base, key, command, body = sys.argv[1:]
    client = openai.OpenAI(base_url=base, api_key="none" if key == "-" else key, max_retries=0, timeout=600)
    try:
        result = run(client, command, json.loads(body))
        print(json.dumps({"ok": True, "result": result}))
    except Exception as e:
        print(json.dumps({"ok": False, "kind": type(e).__name__, "status": getattr(e, "status_code", None),
                          "message": str(getattr(e, "message", e))}))


if __name__ == "__main__":
    main()
