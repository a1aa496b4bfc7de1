#include "server/openai_format.h"

#include <nlohmann/json.hpp>

namespace tierkv::server {

namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json Base(const ResponseHead& h, bool chunk) {
  return json{{"id", h.id},
              {"object", h.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", h.created},
              {"model", h.model}};
}

json UsageJson(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

}  // namespace

Usage UsageOf(const sched::Outcome& o, size_t prompt_tokens) {
  return Usage{prompt_tokens, o.completion_tokens, o.prefill.reused_tokens};
}

std::string CompletionBody(const ResponseHead& h, const sched::Outcome& o, const Usage& u) {
  json j = Base(h, false);
  json choice{{"index", 0}, {"finish_reason", sched::FinishReasonName(o.reason)}};
  if (h.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", o.text}};
  } else {
    choice["text"] = o.text;
    choice["logprobs"] = nullptr;
  }
  j["choices"] = json::array({choice});
  j["usage"] = UsageJson(u);
  // Ours: where the time went and what was reused.
  j["tierkv"] = {{"queue_ms", o.queue_ms},
                 {"ttft_ms", o.ttft_ms},
                 {"decode_ms", o.decode_ms},
                 {"reused_tokens", o.prefill.reused_tokens},
                 {"disk_bytes_read", o.prefill.disk_bytes_read},
                 {"host_bytes_read", o.prefill.host_bytes_read},
                 {"device_bytes_read", o.prefill.device_bytes_read}};
  return Dump(j);
}

std::string ChunkEvent(const ResponseHead& h, const std::string& text, bool first, const char* finish_reason) {
  json j = Base(h, true);
  json choice{{"index", 0}, {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  if (h.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || !finish_reason) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  j["choices"] = json::array({choice});
  return "data: " + Dump(j) + "\n\n";
}

std::string UsageEvent(const ResponseHead& h, const Usage& u) {
  json j = Base(h, true);
  j["choices"] = json::array();
  j["usage"] = UsageJson(u);
  return "data: " + Dump(j) + "\n\n";
}

int HttpStatusOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorBody(int http_status, const Status& s) {
  const std::string& m = s.message();
  json param = nullptr;
  if (s.code() == StatusCode::kInvalidArgument) {
    const size_t colon = m.find(':');
    if (colon != std::string::npos && m.find(' ') > colon) param = m.substr(0, colon);
  }
  const char* type = http_status == 401 || http_status == 403 ? "authentication_error"
                     : http_status == 429                      ? "rate_limit_error"
                     : http_status == 503                      ? "unavailable_error"
                     : http_status >= 400 && http_status < 500 ? "invalid_request_error"
                                                               : "server_error";
  return Dump(json{{"error", {{"message", m}, {"type", type}, {"param", param}, {"code", http_status}}}});
}

}  // namespace tierkv::server
