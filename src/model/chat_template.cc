#include "tierkv/chat.h"

#include <ctime>
#include <regex>

namespace tierkv {
namespace {

constexpr std::string_view kFlagHint =
    "; pass --chat-template llama3|chatml|mistral|tierkv to choose a renderer";

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Jinja's `trim`: leading and trailing whitespace (ASCII; Python's str.strip
// also strips Unicode spaces, which no test conversation has).
std::string Trim(std::string_view s) {
  constexpr std::string_view kWs = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(kWs) - b + 1));
}

// The text of a Jinja string literal's escapes that templates use.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
  }
  return out;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

// Segments as the templates write them: adjacent template text joins.
class Segments {
 public:
  void Template(std::string_view text) {
    if (!out_.empty() && out_.back().from_template) {
      out_.back().text += text;
    } else {
      out_.push_back({std::string(text), true});
    }
  }
  void Content(std::string text) { out_.push_back({std::move(text), false}); }
  std::vector<ChatSegment> Take() { return std::move(out_); }

 private:
  std::vector<ChatSegment> out_;
};

std::string At(size_t i) { return "messages[" + std::to_string(i) + "]"; }

// Meta's Llama 3.1-3.3 template without tools.
std::vector<ChatSegment> RenderLlama3(const ChatTemplate& t, std::span<const ChatMessage> m, std::string_view bos) {
  Segments s;
  s.Template(bos);
  s.Template("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
  s.Template(t.date.empty() ? Today() : t.date);
  s.Template("\n\n");
  size_t first = 0;
  if (!m.empty() && m[0].role == "system") {
    s.Content(Trim(m[0].content));
    first = 1;
  }
  s.Template("<|eot_id|>");
  for (size_t i = first; i < m.size(); ++i) {
    s.Template("<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n");
    s.Content(Trim(m[i].content));
    s.Template("<|eot_id|>");
  }
  s.Template("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return s.Take();
}

// ChatML as Qwen2 and Qwen2.5 write it (without tools): a system turn first,
// the template's default when the conversation has none.
std::vector<ChatSegment> RenderChatMl(const ChatTemplate& t, std::span<const ChatMessage> m) {
  Segments s;
  size_t first = 0;
  if (!m.empty() && m[0].role == "system") {
    s.Template("<|im_start|>system\n");
    s.Content(m[0].content);
    s.Template("<|im_end|>\n");
    first = 1;
  } else if (!t.default_system.empty()) {
    s.Template("<|im_start|>system\n" + t.default_system + "<|im_end|>\n");
  }
  for (size_t i = first; i < m.size(); ++i) {
    s.Template("<|im_start|>" + m[i].role + "\n");
    s.Content(m[i].content);
    s.Template("<|im_end|>\n");
  }
  s.Template("<|im_start|>assistant\n");
  return s.Take();
}

// Mistral Nemo's template: roles alternate user/assistant after an optional
// system message, which is written into the last turn when that is the
// user's.
Result<std::vector<ChatSegment>> RenderMistral(std::span<const ChatMessage> m, std::string_view bos,
                                               std::string_view eos) {
  const bool has_system = !m.empty() && m[0].role == "system";
  const size_t first = has_system ? 1 : 0;
  for (size_t i = first; i < m.size(); ++i) {
    const bool user_turn = (i - first) % 2 == 0;
    if ((m[i].role == "user") != user_turn || m[i].role == "system") {
      return Status::InvalidArgument(At(i) + ".role: Mistral's template needs the roles to alternate "
                                     "user/assistant/user/... after an optional first system message, got \"" +
                                     m[i].role + "\"");
    }
  }
  Segments s;
  s.Template(bos);
  for (size_t i = first; i < m.size(); ++i) {
    if (m[i].role == "user") {
      s.Template("[INST]");
      if (has_system && i + 1 == m.size()) s.Content(m[0].content + "\n\n" + m[i].content);
      else s.Content(m[i].content);
      s.Template("[/INST]");
    } else {
      s.Content(m[i].content);
      s.Template(eos);
    }
  }
  return s.Take();
}

// The default model's format; each unit tokenized on its own as plain text.
std::vector<ChatSegment> RenderTierkv(std::span<const ChatMessage> m) {
  std::vector<ChatSegment> out;
  for (const ChatMessage& msg : m) {
    if (msg.role == "system") {
      out.push_back({msg.content + "\n\n", false});
    } else if (msg.role == "user") {
      out.push_back({"User: " + msg.content + "\n", false});
    } else {
      // Two units, so that the answer's turn starts with the tokens that prompted it.
      out.push_back({"Assistant:", false});
      out.push_back({" " + msg.content + "\n", false});
    }
  }
  out.push_back({"Assistant:", false});
  return out;
}

// The segments as llama.cpp tokenizes the whole rendered text (control
// tokens split it, each run of text between them encoded at once), except
// that control tokens are found only in the template's own text.
Status EncodeAsOneText(const Tokenizer& tok, std::span<const ChatSegment> segments, std::vector<int32_t>* out) {
  std::string run;
  auto flush = [&]() -> Status {
    if (run.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(run, /*add_bos=*/false));
    out->insert(out->end(), ids.begin(), ids.end());
    run.clear();
    return Status::Ok();
  };
  for (const ChatSegment& s : segments) {
    if (!s.from_template) {
      run += s.text;
      continue;
    }
    for (const TextOrToken& p : SplitAtControlTokens(tok, s.text)) {
      if (p.token < 0) {
        run += p.text;
        continue;
      }
      RETURN_IF_ERROR(flush());
      out->push_back(p.token);
    }
  }
  return flush();
}

}  // namespace

std::string_view ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kTierkv: return "tierkv";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kMistral: return "mistral";
  }
  return "?";
}

Result<ChatFormat> ParseChatFormat(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kTierkv, ChatFormat::kLlama3, ChatFormat::kChatMl, ChatFormat::kMistral}) {
    if (ChatFormatName(f) == name) return f;
  }
  return Status::InvalidArgument("--chat-template: \"" + std::string(name) +
                                 "\" is not a renderer (auto, llama3, chatml, mistral, tierkv)");
}

Result<ChatTemplate> RecognizeChatTemplate(std::string_view src) {
  ChatTemplate t;
  t.detected = true;
  if (src.empty()) {
    t.format = ChatFormat::kTierkv;
  } else if (Contains(src, "<|start_header_id|>") && Contains(src, "Cutting Knowledge Date")) {
    t.format = ChatFormat::kLlama3;
  } else if (Contains(src, "<|im_start|>") && Contains(src, "<|im_end|>")) {
    t.format = ChatFormat::kChatMl;
    // The system turn the template writes when there is none, from its
    // literal (its newline escaped, or not: GGUF files hold both).
    static const std::regex kDefault(R"(<\|im_start\|>system(?:\\n|\n)([^'"{}]+)<\|im_end\|>)");
    std::match_results<std::string_view::const_iterator> hit;
    if (std::regex_search(src.begin(), src.end(), hit, kDefault)) t.default_system = Unescape(hit[1].str());
  } else if (Contains(src, "[INST]") && Contains(src, "[/INST]") && !Contains(src, "[INST] ") &&
             !Contains(src, " [/INST]")) {
    t.format = ChatFormat::kMistral;
  } else {
    return Status::InvalidArgument(
        "tokenizer.chat_template: not a template tierkv renders (Llama 3.1-3.3, ChatML as Qwen2/Qwen2.5, "
        "Mistral Nemo)" + std::string(kFlagHint));
  }
  return t;
}

Result<ChatTemplate> ChooseChatTemplate(const std::optional<Vocab>& vocab, std::string_view choice) {
  if (choice == "auto") return RecognizeChatTemplate(vocab ? std::string_view(vocab->chat_template) : "");
  ChatTemplate t;
  ASSIGN_OR_RETURN(t.format, ParseChatFormat(choice));
  if (t.format == ChatFormat::kChatMl && vocab) {
    // A named chatml still takes the model's default system message, if its template has one.
    auto r = RecognizeChatTemplate(vocab->chat_template);
    if (r.ok() && r->format == ChatFormat::kChatMl) t.default_system = r->default_system;
  }
  return t;
}

Result<std::vector<ChatSegment>> RenderChat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                            std::string_view bos, std::string_view eos) {
  if (messages.empty()) return Status::InvalidArgument("messages: must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") {
      return Status::InvalidArgument(At(i) + ".role: must be \"system\", \"user\" or \"assistant\", got \"" + r + "\"");
    }
  }
  switch (t.format) {
    case ChatFormat::kLlama3: return RenderLlama3(t, messages, bos);
    case ChatFormat::kChatMl: return RenderChatMl(t, messages);
    case ChatFormat::kMistral: return RenderMistral(messages, bos, eos);
    case ChatFormat::kTierkv: return RenderTierkv(messages);
  }
  return Status::InvalidArgument("unknown chat format");
}

std::string ChatText(std::span<const ChatSegment> segments) {
  std::string out;
  for (const ChatSegment& s : segments) out += s.text;
  return out;
}

Result<std::vector<int32_t>> ChatPromptTokens(const Tokenizer& tok, const ChatTemplate& t,
                                              std::span<const ChatMessage> messages) {
  ASSIGN_OR_RETURN(std::vector<ChatSegment> segments,
                   RenderChat(t, messages, tok.ControlText(tok.bos_id()), tok.ControlText(tok.eos_id())));
  std::vector<int32_t> out;
  if (t.format == ChatFormat::kTierkv) {
    for (const ChatSegment& s : segments) {
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(s.text, /*add_bos=*/false));
      out.insert(out.end(), ids.begin(), ids.end());
    }
  } else {
    RETURN_IF_ERROR(EncodeAsOneText(tok, segments, &out));
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> bos, tok.Encode("", /*add_bos=*/true));
  if (!bos.empty() && (out.empty() || out.front() != bos.front())) out.insert(out.begin(), bos.front());
  return out;
}

std::optional<int32_t> ChatEndOfTurnToken(const Tokenizer& tok, const ChatTemplate& t) {
  const std::string_view text = t.format == ChatFormat::kLlama3   ? "<|eot_id|>"
                                : t.format == ChatFormat::kChatMl ? "<|im_end|>"
                                                                  : "";
  if (text.empty()) return std::nullopt;
  for (const auto& c : tok.ControlTokens()) {
    if (c.first == text) return c.second;
  }
  return std::nullopt;
}

}  // namespace tierkv
