#include "server/chat_template.h"

#include <string>

namespace tierkv::server {

namespace {

Status Append(const Tokenizer& tok, const std::string& text, std::vector<int32_t>* out) {
  ASSIGN_OR_RETURN(std::vector<int32_t> t, tok.Encode(text, /*add_bos=*/false));
  out->insert(out->end(), t.begin(), t.end());
  return Status::Ok();
}

}  // namespace

Result<std::vector<int32_t>> ChatPromptTokens(const Tokenizer& tok, std::span<const ChatMessage> messages) {
  std::vector<int32_t> out{tok.bos_id()};
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      RETURN_IF_ERROR(Append(tok, m.content + "\n\n", &out));
    } else if (m.role == "user") {
      RETURN_IF_ERROR(Append(tok, "User: " + m.content + "\n", &out));
    } else if (m.role == "assistant") {
      RETURN_IF_ERROR(Append(tok, "Assistant:", &out));
      RETURN_IF_ERROR(Append(tok, " " + m.content + "\n", &out));
    } else {
      return Status::InvalidArgument("messages: unknown role \"" + m.role + "\"");
    }
  }
  RETURN_IF_ERROR(Append(tok, "Assistant:", &out));
  return out;
}

}  // namespace tierkv::server
