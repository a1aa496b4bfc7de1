// Authenticated remote values (docs/remote.md, "Who may write the tier"):
// a value in Redis is trusted only when a key that every server of one
// deployment holds, and nobody who can merely write to Redis does, sealed
// it. The record's own checksums (XXH3 with a public seed) catch damage,
// not forgery: anyone who can write a value can recompute them.
//
// A sealed value is the record (header block and payload pages) followed by
// its seal:
//   "TKVSEAL1" | key id (8 bytes) | SHA-256 of each payload page (32 each) | MAC (32)
// key id: the first 8 bytes of SHA-256("tierkv remote key id" || key);
// MAC: HMAC-SHA256(key, "tierkv remote value v1" || le32(len(name)) || name
//   || header block || page digests), `name` the value's Redis key, so a
// value copied under another key fails. A reader of a part checks the
// header block and the seal with the MAC, then each page it fetched against
// its digest.
//
// Keys: one per line of a key file (the first seals, every one opens:
// rotation, docs/remote.md), or $TIERKV_REMOTE_KEY; never the command line.
//
// Thread safety: const after Load; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::remote {

// The environment variable holding the key when no key file is given.
inline constexpr const char* kRemoteKeyEnv = "TIERKV_REMOTE_KEY";
// Keys shorter than this are refused (a guessable key is no key).
inline constexpr size_t kMinKeyBytes = 16;
inline constexpr size_t kSealFixedBytes = 8 + 8 + 32;
inline constexpr size_t kPageDigestBytes = 32;

// What a seal check found.
enum class SealCheck : uint8_t {
  kOk,
  kUnsealed,  // no seal, or one made with a key this server does not hold (another deployment): a miss
  kForged,    // a seal of one of our keys that does not match the bytes: rejected, never served
};

class Sealer {
 public:
  // The keys of `key_file` (one per line; blank lines and lines starting
  // with '#' skipped; surrounding spaces trimmed), or without a file of
  // $TIERKV_REMOTE_KEY. InvalidArgument naming the problem: no key at all,
  // a key shorter than kMinKeyBytes (by its line), a file readable by its
  // group or others, a file over 64 KiB.
  static Result<Sealer> Load(const std::string& key_file);
  // From keys in memory (tests, benchmarks); the first seals.
  static Result<Sealer> FromKeys(std::vector<std::string> keys);

  static size_t SealBytes(uint32_t pages) { return kSealFixedBytes + kPageDigestBytes * pages; }

  // Appends the seal of `record` (a whole record: header block and pages),
  // stored under Redis key `name`.
  void Seal(std::string_view name, std::string* record) const;
  // A whole value of `pages` payload pages: kOk leaves the record alone in
  // *value (the seal cut off). *why says what failed.
  SealCheck OpenWhole(std::string_view name, uint32_t pages, std::string* value, std::string* why) const;
  // The header block and the seal of a value read in part (pages from the
  // seal's length).
  SealCheck CheckHeader(std::string_view name, std::string_view block0, std::string_view seal, std::string* why) const;
  // Payload page `page` against an authentic seal's digest.
  static bool PageOk(std::string_view seal, uint32_t page, std::string_view bytes);

  size_t keys() const { return keys_.size(); }
  // The sealing key's id in hex (16 digits): what servers sharing values compare in their logs.
  std::string seal_key_id() const;

 private:
  struct Key {
    std::string secret;
    std::string id;  // 8 bytes
  };
  explicit Sealer(std::vector<Key> keys) : keys_(std::move(keys)) {}
  const Key* Find(std::string_view id) const;
  std::string Mac(const Key& k, std::string_view name, std::string_view block0, std::string_view digests) const;

  std::vector<Key> keys_;  // [0] seals
};

}  // namespace tierkv::remote
