#include "remote/seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "store/format.h"

namespace tierkv::remote {
namespace {

constexpr std::string_view kMagic = "TKVSEAL1";
constexpr std::string_view kIdLabel = "tierkv remote key id";
constexpr std::string_view kMacLabel = "tierkv remote value v1";
constexpr uint64_t kMaxKeyFileBytes = 64u << 10;

std::string Sha256(std::string_view a, std::string_view b = {}) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, a.data(), a.size());
  EVP_DigestUpdate(ctx, b.data(), b.size());
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  return std::string(reinterpret_cast<const char*>(md), 32);
}

std::string Trim(const std::string& s) {
  // Every kind of white space: a key from a file given to the environment
  // (a Kubernetes secret, `$(cat key)`) keeps its newline.
  constexpr const char* kSpace = " \t\r\n\v\f";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace

Result<Sealer> Sealer::FromKeys(std::vector<std::string> keys) {
  if (keys.empty()) return Status::InvalidArgument("remote key: none given");
  std::vector<Key> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].size() < kMinKeyBytes) {
      return Status::InvalidArgument("remote key " + std::to_string(i + 1) + ": " + std::to_string(keys[i].size()) +
                                     " bytes, at least " + std::to_string(kMinKeyBytes) +
                                     " needed (e.g. `openssl rand -hex 32`)");
    }
    out.push_back(Key{keys[i], Sha256(kIdLabel, keys[i]).substr(0, 8)});
  }
  return Sealer(std::move(out));
}

Result<Sealer> Sealer::Load(const std::string& key_file) {
  if (key_file.empty()) {
    const char* env = std::getenv(kRemoteKeyEnv);
    if (env == nullptr || *env == '\0') {
      return Status::InvalidArgument(
          std::string("remote key: none (the remote tier takes only values sealed with the servers' shared key: "
                      "give it in --remote-key-file FILE or $") +
          kRemoteKeyEnv + "; make one with `openssl rand -hex 32`)");
    }
    return FromKeys({Trim(env)});
  }
  struct stat st;
  if (::stat(key_file.c_str(), &st) != 0) {
    return Status::InvalidArgument("remote key file '" + key_file + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument("remote key file '" + key_file + "': readable by others (mode " + mode +
                                   "); chmod 600 it");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxKeyFileBytes) {
    return Status::InvalidArgument("remote key file '" + key_file + "': over 64 KiB");
  }
  std::ifstream in(key_file);
  if (!in) return Status::InvalidArgument("remote key file '" + key_file + "': cannot read");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  auto s = FromKeys(std::move(keys));
  if (!s.ok()) return Status::InvalidArgument("remote key file '" + key_file + "': " + s.status().message());
  return s;
}

std::string Sealer::seal_key_id() const {
  std::string hex;
  for (unsigned char c : keys_[0].id) {
    static const char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

const Sealer::Key* Sealer::Find(std::string_view id) const {
  for (const Key& k : keys_) {
    if (k.id == id) return &k;
  }
  return nullptr;
}

std::string Sealer::Mac(const Key& k, std::string_view name, std::string_view block0, std::string_view digests) const {
  std::string msg;
  msg.reserve(kMacLabel.size() + 4 + name.size() + block0.size() + digests.size());
  msg.append(kMacLabel);
  const uint32_t n = static_cast<uint32_t>(name.size());
  for (int i = 0; i < 4; ++i) msg.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  msg.append(name).append(block0).append(digests);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), k.secret.data(), static_cast<int>(k.secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), 32);
}

void Sealer::Seal(std::string_view name, std::string* record) const {
  const size_t B = store::kBlockSize;
  const uint32_t pages = static_cast<uint32_t>(record->size() / B - 1);
  std::string digests;
  digests.reserve(kPageDigestBytes * pages);
  for (uint32_t p = 0; p < pages; ++p) digests += Sha256(std::string_view(*record).substr(B * (1 + p), B));
  const Key& k = keys_[0];
  const std::string mac = Mac(k, name, std::string_view(*record).substr(0, B), digests);
  record->append(kMagic).append(k.id).append(digests).append(mac);
}

SealCheck Sealer::CheckHeader(std::string_view name, std::string_view block0, std::string_view seal,
                         std::string* why) const {
  if (seal.size() < kSealFixedBytes || seal.substr(0, 8) != kMagic ||
      (seal.size() - kSealFixedBytes) % kPageDigestBytes != 0) {
    *why = "no seal";
    return SealCheck::kUnsealed;
  }
  const Key* k = Find(seal.substr(8, 8));
  if (k == nullptr) {
    *why = "sealed with a key this server does not hold";
    return SealCheck::kUnsealed;
  }
  const std::string_view digests = seal.substr(16, seal.size() - kSealFixedBytes);
  const std::string mac = Mac(*k, name, block0, digests);
  if (CRYPTO_memcmp(mac.data(), seal.data() + seal.size() - 32, 32) != 0) {
    *why = "its seal does not match (forged, copied from another key, or damaged)";
    return SealCheck::kForged;
  }
  return SealCheck::kOk;
}

bool Sealer::PageOk(std::string_view seal, uint32_t page, std::string_view bytes) {
  const size_t at = 16 + size_t{page} * kPageDigestBytes;
  if (at + kPageDigestBytes + 32 > seal.size()) return false;
  const std::string d = Sha256(bytes);
  return CRYPTO_memcmp(d.data(), seal.data() + at, kPageDigestBytes) == 0;
}

SealCheck Sealer::OpenWhole(std::string_view name, uint32_t pages, std::string* value, std::string* why) const {
  const size_t B = store::kBlockSize, record = B * (1 + size_t{pages});
  if (value->size() == record) {
    *why = "no seal";
    return SealCheck::kUnsealed;
  }
  if (value->size() != record + SealBytes(pages)) {
    *why = "a value of " + std::to_string(value->size()) + " bytes, a sealed one has " +
           std::to_string(record + SealBytes(pages));
    return SealCheck::kForged;  // cut short or padded: damaged or forged, never another deployment's record
  }
  const std::string_view v(*value);
  const std::string_view seal = v.substr(record);
  const SealCheck s = CheckHeader(name, v.substr(0, B), seal, why);
  if (s != SealCheck::kOk) return s;
  for (uint32_t p = 0; p < pages; ++p) {
    if (!PageOk(seal, p, v.substr(B * (1 + p), B))) {
      *why = "payload page " + std::to_string(p) + " does not match its sealed digest";
      return SealCheck::kForged;
    }
  }
  value->resize(record);
  return SealCheck::kOk;
}

}  // namespace tierkv::remote
