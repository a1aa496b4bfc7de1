// The official OpenAI Node client against a tierkv server, for the
// server's black-box tests. Usage:
//   node client.mjs BASE_URL KEY COMMAND JSON
// COMMAND: completion | chat (the request JSON; "stream": true streams),
// retrieve (JSON: {"id": ...}). KEY "-": no API key. Prints one JSON line:
// {"ok": true, "result": ...} or {"ok": false, "kind": <error class>,
// "status": <HTTP status or null>, "message": ...}; a stream's result is
// {"text", "chunks", "finish_reason", "usage"}.
import OpenAI from "openai";

const [base, key, command, body] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key === "-" ? "none" : key, maxRetries: 0, timeout: 600000 });
const req = JSON.parse(body ?? "{}");

async function run() {
  if (command === "retrieve") return await client.models.retrieve(req.id);
  const api = command === "chat" ? client.chat.completions : client.completions;
  if (!req.stream) return await api.create(req);
  const stream = await api.create(req);
  const out = { text: "", chunks: 0, finish_reason: null, usage: null };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices?.[0];
    if (!c) continue;
    out.text += command === "chat" ? (c.delta?.content ?? "") : (c.text ?? "");
    if (c.finish_reason) out.finish_reason = c.finish_reason;
  }
  return out;
}

try {
  const result = await run();
  console.log(JSON.stringify({ ok: true, result }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, kind: e?.constructor?.name ?? "Error", status: e?.status ?? null,
                               message: String(e?.message ?? e) }));
}
