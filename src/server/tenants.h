// Who a request is and whose stored prefixes it may use: the API key its
// Authorization header carries (compared in constant time, every key
// tried), and the prefix namespace of that key and the request's
// cache_salt (engine::ServeOptions::cache_namespace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tierkv::server {

// Whether an Authorization header is "Bearer <token>" (the scheme in any
// case, then one or more spaces: RFC 9110), the token compared in time
// independent of where they first differ.
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
