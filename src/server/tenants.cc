#include "server/tenants.h"

#include <xxhash.h>

#include <cctype>

namespace tierkv::server {

bool TokenMatches(const std::string& header, const std::string& token) {
  static const std::string kBearer = "bearer";
  if (header.size() <= kBearer.size() || header[kBearer.size()] != ' ') return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return false;
  }
  const size_t at = header.find_first_not_of(' ', kBearer.size());
  if (at == std::string::npos || header.size() - at != token.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(header[at + i] ^ token[i]);
  return diff == 0;
}

const std::string* MatchingKey(const std::string& header, const std::vector<std::string>& keys) {
  const std::string* found = nullptr;
  for (const std::string& k : keys) {
    if (TokenMatches(header, k)) found = &k;
  }
  return found;
}

uint64_t CacheNamespace(const std::string& tenant, const std::string& salt) {
  if (tenant.empty() && salt.empty()) return 0;
  const std::string material = "tierkv-ns:" + std::to_string(tenant.size()) + ":" + tenant + salt;
  const uint64_t ns = XXH3_64bits(material.data(), material.size());
  return ns == 0 ? 1 : ns;
}

}  // namespace tierkv::server
