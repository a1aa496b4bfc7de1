#include "server/tenants.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <cctype>
#include <string_view>

namespace tierkv::server {

namespace {

struct Digest {
  unsigned char bytes[SHA256_DIGEST_LENGTH];
};

Digest Sha256(std::string_view s) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.bytes);
  return d;
}

}  // namespace

Status CheckCredential(const std::string& what, const std::string& value) {
  if (value.empty()) return Status::InvalidArgument(what + ": is empty");
  if (value.size() > kMaxCredentialBytes) {
    return Status::InvalidArgument(what + ": is " + std::to_string(value.size()) +
                                   " bytes, more than the " + std::to_string(kMaxCredentialBytes) +
                                   " a client may send");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument(
          what + ": byte " + std::to_string(i + 1) +
          " is a space or a control character, which no Authorization header "
          "carries intact");
    }
  }
  return Status::Ok();
}

bool TokenMatches(const std::string& header, const std::string& token) {
  static const std::string kBearer = "bearer";
  if (header.size() <= kBearer.size() || header[kBearer.size()] != ' ') return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return false;
  }
  // The scheme is public. From here the time depends on the sent token's
  // length (the client's own) and on the secret's in SHA-256 blocks (one up
  // to 55 bytes), never on how the two compare.
  const size_t at = header.find_first_not_of(' ', kBearer.size());
  if (at == std::string::npos) return false;
  const Digest sent = Sha256(std::string_view(header).substr(at));
  const Digest want = Sha256(token);
  return CRYPTO_memcmp(sent.bytes, want.bytes, sizeof sent.bytes) == 0;
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
