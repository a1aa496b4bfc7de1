#include "server/api.h"

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace tierkv::server {

namespace {

using nlohmann::json;

std::string Short(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

Status Bad(const std::string& field, const std::string& why) {
  return Status::InvalidArgument(field + ": " + why);
}

// A number field in [lo, hi] (lo excluded when open_lo).
Result<double> NumberIn(const json& v, const std::string& field, double lo, double hi,
                        bool open_lo) {
  if (!v.is_number()) return Bad(field, "must be a number");
  const double x = v.get<double>();
  if (!(open_lo ? x > lo : x >= lo) || !(x <= hi)) {
    return Bad(field, "must be in " + std::string(open_lo ? "(" : "[") + Short(lo) + ", " +
                          Short(hi) + "], got " + v.dump());
  }
  return x;
}

Result<std::vector<std::string>> ParseStop(const json& v) {
  std::vector<std::string> stop;
  if (v.is_null()) return stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4) return Bad("stop", "at most 4 sequences, got " + std::to_string(v.size()));
    for (const json& s : v) {
      if (!s.is_string()) return Bad("stop", "must be a string or an array of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return Bad("stop", "must be a string or an array of strings");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return Bad("stop", "sequences must not be empty");
  }
  return stop;
}

Status ParsePrompt(const json& body, CompletionRequest* r) {
  if (!body.contains("prompt")) return Bad("prompt", "required");
  const json& p = body["prompt"];
  if (p.is_string()) {
    r->prompt = p.get<std::string>();
    return Status::Ok();
  }
  if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    for (const json& t : p) {
      if (!t.is_number_integer())
        return Bad("prompt", "an array of token ids must hold only integers");
      // Ids beyond int32 are refused here; the vocabulary's bound is checked
      // against the model (a negative id stays negative and is refused there).
      if (t.is_number_unsigned() ? t.get<uint64_t>() > INT32_MAX
                                 : t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX) {
        return Bad("prompt", "token id " + t.dump() + " is out of range");
      }
      r->prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return Status::Ok();
  }
  if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r->prompt = p[0].get<std::string>();
    return Status::Ok();
  }
  if (p.is_array() && p.size() > 1)
    return Bad("prompt", "one prompt per request (batches are not supported)");
  return Bad("prompt", "must be a string or an array of token ids");
}

// "content": a string, or OpenAI's array of parts of which only text is supported.
Result<std::string> MessageContent(const json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return Bad(field, "must be a string or an array of text parts");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Bad(field, "only parts of type \"text\" with a string \"text\" are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

Status ParseMessages(const json& body, CompletionRequest* r) {
  if (!body.contains("messages")) return Bad("messages", "required");
  const json& m = body["messages"];
  if (!m.is_array() || m.empty()) return Bad("messages", "must be a non-empty array");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object()) return Bad(at, "must be an object");
    if (!m[i].contains("role") || !m[i]["role"].is_string())
      return Bad(at + ".role", "required string");
    ChatMessage msg;
    msg.role = m[i]["role"].get<std::string>();
    // OpenAI's newer SDKs send "developer" for what older ones call system.
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
      return Bad(at + ".role",
                 "must be \"system\", \"developer\", \"user\" or \"assistant\", got \"" + msg.role + "\"");
    }
    if (!m[i].contains("content")) return Bad(at + ".content", "required");
    // An assistant turn may carry null content (OpenAI's shape for a turn of tool calls).
    const bool empty_ok = msg.role == "assistant" && m[i]["content"].is_null();
    auto content = empty_ok ? Result<std::string>(std::string()) : MessageContent(m[i]["content"], at + ".content");
    if (!content.ok()) return content.status();
    msg.content = std::move(*content);
    r->messages.push_back(std::move(msg));
  }
  return Status::Ok();
}

Status ParseSampling(const json& body, CompletionRequest* r) {
  r->sampler.temperature = 1.0f;
  r->sampler.top_p = 1.0f;
  if (body.contains("temperature") && !body["temperature"].is_null()) {
    auto t = NumberIn(body["temperature"], "temperature", 0, 2, false);
    if (!t.ok()) return t.status();
    r->sampler.temperature = static_cast<float>(*t);
  }
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    auto p = NumberIn(body["top_p"], "top_p", 0, 1, true);
    if (!p.ok()) return p.status();
    r->sampler.top_p = static_cast<float>(*p);
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) return Bad("seed", "must be an integer");
    r->sampler.seed = body["seed"].is_number_unsigned()
                          ? body["seed"].get<uint64_t>()
                          : static_cast<uint64_t>(body["seed"].get<int64_t>());
  }
  return Status::Ok();
}

Status ParseLimits(const json& body, CompletionRequest* r) {
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(f) || body[f].is_null()) continue;
    const json& v = body[f];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 30)) {
      return Bad(f, "must be an integer of at least 1, got " + v.dump());
    }
    r->max_tokens = static_cast<int>(v.get<int64_t>());
  }
  if (body.contains("n") && !body["n"].is_null() && body["n"] != 1) {
    return Bad("n", "only 1 completion per request is supported, got " + body["n"].dump());
  }
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {
    if (!body["ignore_eos"].is_boolean()) return Bad("ignore_eos", "must be true or false");
    r->ignore_eos = body["ignore_eos"].get<bool>();
  }
  if (body.contains("retention") && !body["retention"].is_null()) {
    auto x = NumberIn(body["retention"], "retention", 0, 1, true);
    if (!x.ok()) return x.status();
    r->retention = *x;
  }
  return Status::Ok();
}

Status ParseStreaming(const json& body, CompletionRequest* r) {
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return Bad("stream", "must be true or false");
    r->stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "must be an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        return Bad("stream_options.include_usage", "must be true or false");
      r->include_usage = so["include_usage"].get<bool>();
    }
  }
  return Status::Ok();
}

// OpenAI fields that change the answer and are not implemented: refused
// unless absent, null or their default on that endpoint. Completions'
// `logprobs` is a count whose default is null: any value asks for
// probabilities (0 asks for the chosen token's), so any value is refused;
// chat's is a boolean, false by default. `top_logprobs` asks for
// probabilities whatever its value.
Status RefuseUnsupported(const json& body, bool chat) {
  struct Field {
    const char* name;
    bool (*is_default)(const json&);
    bool (*is_default_in_chat)(const json&) = nullptr;  // null: as is_default
  };
  static const auto kNever = [](const json&) { return false; };
  static const auto kFalse = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  static const Field kFields[] = {
      {"logprobs", kNever, kFalse},
      {"top_logprobs", kNever},
      {"echo", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
      {"best_of", [](const json& v) { return v == 1; }},
      {"suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }},
      {"logit_bias", [](const json& v) { return v.is_object() && v.empty(); }},
      {"presence_penalty", [](const json& v) { return v.is_number() && v.get<double>() == 0; }},
      {"frequency_penalty", [](const json& v) { return v.is_number() && v.get<double>() == 0; }},
      {"response_format",
       [](const json& v) { return v.is_object() && v.size() == 1 && v.value("type", "") == "text"; }},
      {"tools", [](const json& v) { return v.is_array() && v.empty(); }},
      {"functions", [](const json& v) { return v.is_array() && v.empty(); }},
      // "auto" with no tools (checked above) means none.
      {"tool_choice", [](const json& v) { return v == "none" || v == "auto"; }},
      {"function_call", [](const json& v) { return v == "none"; }},
  };
  for (const Field& f : kFields) {
    const auto is_default = chat && f.is_default_in_chat ? f.is_default_in_chat : f.is_default;
    if (!body.contains(f.name) || body[f.name].is_null() || is_default(body[f.name])) continue;
    return Bad(f.name, "not supported by this server (only its default is accepted), got " +
                           body[f.name].dump().substr(0, 100));
  }
  return Status::Ok();
}

Status ParseCacheSalt(const json& body, CompletionRequest* r) {
  if (!body.contains("cache_salt") || body["cache_salt"].is_null()) return Status::Ok();
  const json& v = body["cache_salt"];
  if (!v.is_string()) return Bad("cache_salt", "must be a string");
  r->cache_salt = v.get<std::string>();
  if (r->cache_salt.empty() || r->cache_salt.size() > 256) {
    return Bad("cache_salt", "must be 1 to 256 bytes, got " + std::to_string(r->cache_salt.size()));
  }
  return Status::Ok();
}

}  // namespace

Result<CompletionRequest> ParseCompletionRequest(std::string_view text, bool chat) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double
    return Status::InvalidArgument(std::string("body: not JSON (") + e.what() + ")");
  }
  if (!body.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  try {
    RETURN_IF_ERROR(chat ? ParseMessages(body, &r) : ParsePrompt(body, &r));
    RETURN_IF_ERROR(ParseSampling(body, &r));
    RETURN_IF_ERROR(ParseLimits(body, &r));
    RETURN_IF_ERROR(ParseStreaming(body, &r));
    RETURN_IF_ERROR(ParseCacheSalt(body, &r));
    RETURN_IF_ERROR(RefuseUnsupported(body, chat));
    if (body.contains("stop")) {
      ASSIGN_OR_RETURN(r.stop, ParseStop(body["stop"]));
    }
  } catch (const json::exception& e) {
    // A field of an unexpected type the checks above did not name.
    return Status::InvalidArgument(std::string("body: ") + e.what());
  }
  return r;
}

}  // namespace tierkv::server
