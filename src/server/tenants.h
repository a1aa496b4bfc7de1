// Who a request is and whose stored prefixes it may use: the API key its
// Authorization header carries (compared in constant time, every key
// tried), and the prefix namespace of that key and the request's
// cache_salt (engine::ServeOptions::cache_namespace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::server {

// The longest API key or admin token accepted at start: a header line
// longer than this is unusual, and a key that no client could send would
// start a server nobody can call.
inline constexpr size_t kMaxCredentialBytes = 4096;

// Whether `value` can be sent as "Authorization: Bearer <value>": 1 to
// kMaxCredentialBytes bytes of visible ASCII or UTF-8 (no space, tab or
// other control character, which no header can carry intact).
// InvalidArgument naming `what` ("api_keys: key 2") and the reason, never
// quoting the value.
Status CheckCredential(const std::string& what, const std::string& value);

// Whether an Authorization header is "Bearer <token>" (the scheme in any
// case, then one or more spaces: RFC 9110) with `token`. The two are
// compared as SHA-256 digests with CRYPTO_memcmp: the time depends on
// neither where they first differ nor whether their lengths do.
bool TokenMatches(const std::string& header, const std::string& token);

// The API key an Authorization header carries, from `keys` (every key is
// compared, so the time does not tell which matched); null when none.
const std::string* MatchingKey(const std::string& header, const std::vector<std::string>& keys);

// The namespace of a request's prefixes: its tenant (the API key, or ""
// when keys are shared or absent) and its cache_salt, hashed with a domain
// tag; 0 (the shared namespace, that of stores written before tenants
// existed) when both are empty. Stable across restarts: the store keeps it.
uint64_t CacheNamespace(const std::string& tenant, const std::string& salt);

}  // namespace tierkv::server
