#include "engine/profile_file.h"

namespace tierkv::engine {

Result<nlohmann::json> ParseProfileFile(const std::string& text, uint64_t fingerprint) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("not a JSON object");
  if (!j.contains("fingerprint") || !j["fingerprint"].is_number_unsigned()) {
    return Status::InvalidArgument("field 'fingerprint' missing or not a number");
  }
  if (j["fingerprint"].get<uint64_t>() != fingerprint) {
    return Status::InvalidArgument("field 'fingerprint' names another model");
  }
  return j;
}

}  // namespace tierkv::engine
