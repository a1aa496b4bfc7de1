#include "index/radix_tree.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>

namespace tierkv::index {

uint64_t ChainHash(uint64_t seed, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

namespace {

size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

RadixTree::RadixTree(uint32_t chunk_tokens) : chunk_(chunk_tokens) {
  assert(chunk_tokens >= 1 && chunk_tokens <= 65535);
  nodes_.emplace_back();
  nodes_[0].live = true;
}

uint64_t RadixTree::ChildKey(std::span<const int32_t> first_tokens) const {
  return ChainHash(0x746965726b76ULL, first_tokens.first(std::min<size_t>(chunk_, first_tokens.size())));
}

bool RadixTree::Ends(const Node& n) const { return n.tokens.size() % chunk_ != 0; }

std::pair<uint32_t, size_t> RadixTree::BestChild(uint32_t node,
                                                 std::span<const int32_t> rest) const {
  const Node& n = nodes_[node];
  if (rest.empty() || n.children.empty()) return {kNoNode, 0};
  // The common case: a child whose whole first chunk equals the next C tokens.
  if (rest.size() >= chunk_) {
    uint64_t key = ChildKey(rest);
    auto it = std::lower_bound(n.children.begin(), n.children.end(),
                               std::make_pair(key, uint32_t{0}));
    for (; it != n.children.end() && it->first == key; ++it) {
      const Node& c = nodes_[it->second];
      size_t m = CommonPrefix(c.tokens, rest);
      if (m >= chunk_) return {it->second, m};
    }
  }
  // Otherwise the match ends at this level: the child sharing most tokens.
  uint32_t best = kNoNode;
  size_t best_m = 0;
  for (const auto& [key, child] : n.children) {
    size_t m = CommonPrefix(nodes_[child].tokens, rest);
    if (m > best_m) {
      best_m = m;
      best = child;
    }
  }
  return {best, best_m};
}

uint32_t RadixTree::RootOf(uint64_t ns) const {
  if (ns == 0) return 0;
  auto it = roots_.find(ns);
  return it == roots_.end() ? kNoNode : it->second;
}

uint32_t RadixTree::EnsureRoot(uint64_t ns) {
  uint32_t id = RootOf(ns);
  if (id != kNoNode) return id;
  id = NewNode(kNoNode, 0);
  nodes_[id].ns = ns;
  roots_.emplace(ns, id);
  return id;
}

uint64_t RadixTree::NamespaceOf(uint32_t id) const {
  uint32_t n = chunks_[id].node;
  while (nodes_[n].parent != kNoNode) n = nodes_[n].parent;
  return nodes_[n].ns;
}

Match RadixTree::Lookup(std::span<const int32_t> tokens, uint64_t ns) const {
  Match out;
  uint32_t node = RootOf(ns);
  size_t pos = 0;
  if (node == kNoNode) return out;
  for (;;) {
    auto [child, m] = BestChild(node, tokens.subspan(pos));
    if (child == kNoNode || m == 0) break;
    const Node& c = nodes_[child];
    size_t used_chunks = (m + chunk_ - 1) / chunk_;
    out.chunks.insert(out.chunks.end(), c.chunks.begin(), c.chunks.begin() + used_chunks);
    pos += m;
    if (m < c.tokens.size() || Ends(c)) break;
    node = child;
  }
  out.matched_tokens = pos;
  return out;
}

uint32_t RadixTree::NewNode(uint32_t parent, uint32_t first_token) {
  uint32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n = Node{};
  n.parent = parent;
  n.first_token = first_token;
  n.live = true;
  ++live_nodes_;
  return id;
}

void RadixTree::FreeNode(uint32_t id) {
  Node& n = nodes_[id];
  n = Node{};  // releases the vectors' memory
  free_nodes_.push_back(id);
  --live_nodes_;
}

uint32_t RadixTree::NewChunk(uint32_t node, uint16_t index, uint32_t first_token,
                             uint16_t tokens, uint64_t prefix_hash) {
  uint32_t id;
  if (!free_chunks_.empty()) {
    id = free_chunks_.back();
    free_chunks_.pop_back();
  } else {
    id = static_cast<uint32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  chunks_[id] = ChunkInfo{prefix_hash, node, first_token, tokens, index};
  ++live_chunks_;
  return id;
}

void RadixTree::AddChild(uint32_t parent, uint32_t child) {
  auto& ch = nodes_[parent].children;
  auto entry = std::make_pair(ChildKey(nodes_[child].tokens), child);
  ch.insert(std::upper_bound(ch.begin(), ch.end(), entry), entry);
}

void RadixTree::RemoveChild(uint32_t parent, uint32_t child) {
  auto& ch = nodes_[parent].children;
  ch.erase(std::find_if(ch.begin(), ch.end(), [&](const auto& e) { return e.second == child; }));
}

uint32_t RadixTree::Split(uint32_t id, size_t keep) {
  assert(keep > 0 && keep % chunk_ == 0 && keep < nodes_[id].tokens.size());
  uint32_t parent = nodes_[id].parent;
  uint32_t tail = NewNode(id, nodes_[id].first_token + static_cast<uint32_t>(keep));
  Node& n = nodes_[id];  // NewNode may have moved nodes_
  Node& t = nodes_[tail];
  t.tokens.assign(n.tokens.begin() + keep, n.tokens.end());
  size_t keep_chunks = keep / chunk_;
  t.chunks.assign(n.chunks.begin() + keep_chunks, n.chunks.end());
  t.children = std::move(n.children);
  n.children.clear();
  n.tokens.resize(keep);
  n.tokens.shrink_to_fit();
  n.chunks.resize(keep_chunks);
  n.chunks.shrink_to_fit();
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    chunks_[t.chunks[i]].node = tail;
    chunks_[t.chunks[i]].index_in_node = static_cast<uint16_t>(i);
  }
  for (const auto& [key, child] : t.children) nodes_[child].parent = tail;
  // The node's key (its first chunk) is unchanged, so the parent's list stays sorted.
  (void)parent;
  AddChild(id, tail);
  return tail;
}

InsertResult RadixTree::Insert(std::span<const int32_t> tokens, uint64_t ns) {
  InsertResult out;
  uint32_t node = tokens.empty() ? 0 : EnsureRoot(ns);
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto rest = tokens.subspan(pos);
    auto [child, m] = BestChild(node, rest);
    if (child != kNoNode && m == rest.size()) {
      // Every remaining token is already stored (possibly inside a chunk).
      const Node& c = nodes_[child];
      out.chunks.insert(out.chunks.end(), c.chunks.begin(),
                        c.chunks.begin() + (m + chunk_ - 1) / chunk_);
      return out;
    }
    if (child != kNoNode && m == nodes_[child].tokens.size() && !Ends(nodes_[child])) {
      const Node& c = nodes_[child];
      out.chunks.insert(out.chunks.end(), c.chunks.begin(), c.chunks.end());
      node = child;
      pos += m;
      continue;
    }
    size_t keep = child == kNoNode ? 0 : m / chunk_ * chunk_;
    if (keep > 0) {
      // Diverges inside `child` after `keep` chunk-aligned tokens: split there.
      Split(child, keep);
      const Node& c = nodes_[child];
      out.chunks.insert(out.chunks.end(), c.chunks.begin(), c.chunks.end());
      node = child;
      pos += keep;
      rest = tokens.subspan(pos);
    }
    // A new leaf for the rest.
    uint32_t leaf = NewNode(node, static_cast<uint32_t>(pos));
    const Node& parent = nodes_[node];
    uint64_t hash = parent.chunks.empty() ? parent.ns : chunks_[parent.chunks.back()].prefix_hash;
    nodes_[leaf].tokens.assign(rest.begin(), rest.end());
    for (size_t off = 0, i = 0; off < rest.size(); off += chunk_, ++i) {
      size_t len = std::min<size_t>(chunk_, rest.size() - off);
      hash = ChainHash(hash, rest.subspan(off, len));
      uint32_t id = NewChunk(leaf, static_cast<uint16_t>(i), static_cast<uint32_t>(pos + off),
                             static_cast<uint16_t>(len), hash);
      nodes_[leaf].chunks.push_back(id);
      out.chunks.push_back(id);
      out.created.push_back(id);
    }
    AddChild(node, leaf);
    return out;
  }
  return out;
}

size_t RadixTree::PlanInsert(std::span<const int32_t> tokens, uint64_t ns) const {
  uint32_t node = RootOf(ns);
  size_t pos = 0;
  if (node == kNoNode) return 0;
  while (pos < tokens.size()) {
    auto rest = tokens.subspan(pos);
    auto [child, m] = BestChild(node, rest);
    if (child != kNoNode && m == rest.size()) return tokens.size();
    if (child != kNoNode && m == nodes_[child].tokens.size() && !Ends(nodes_[child])) {
      node = child;
      pos += m;
      continue;
    }
    return pos + (child == kNoNode ? 0 : m / chunk_ * chunk_);
  }
  return tokens.size();
}

Result<std::vector<uint32_t>> RadixTree::Truncate(uint32_t chunk,
                                                  std::vector<uint64_t>* prefix_hashes) {
  if (!IsLive(chunk)) {
    return Status::InvalidArgument("chunk " + std::to_string(chunk) + " is not stored");
  }
  std::vector<uint32_t> removed;
  // Leaf tails first, deepest nodes first, so every step is a legal eviction.
  std::vector<uint32_t> order;
  uint32_t top = chunks_[chunk].node;
  std::vector<uint32_t> stack = {top};
  while (!stack.empty()) {
    uint32_t n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const auto& [key, child] : nodes_[n].children) stack.push_back(child);
  }
  size_t first = chunks_[chunk].index_in_node;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    uint32_t n = *it;
    size_t keep = n == top ? first : 0;
    while (nodes_[n].live && nodes_[n].chunks.size() > keep) {
      uint32_t tail = nodes_[n].chunks.back();
      removed.push_back(tail);
      if (prefix_hashes) prefix_hashes->push_back(chunks_[tail].prefix_hash);
      RETURN_IF_ERROR(Evict(tail));
    }
  }
  return removed;
}

bool RadixTree::IsEvictable(uint32_t chunk) const {
  if (!IsLive(chunk)) return false;
  const Node& n = nodes_[chunks_[chunk].node];
  return n.children.empty() && n.chunks.back() == chunk;
}

Status RadixTree::Evict(uint32_t chunk) {
  if (!IsLive(chunk)) {
    return Status::InvalidArgument("chunk " + std::to_string(chunk) + " is not stored");
  }
  if (!IsEvictable(chunk)) {
    return Status::InvalidArgument("chunk " + std::to_string(chunk) +
                                   " is not the tail of a leaf");
  }
  uint32_t id = chunks_[chunk].node;
  Node& n = nodes_[id];
  n.chunks.pop_back();
  n.tokens.resize(n.chunks.size() * chunk_);
  chunks_[chunk] = ChunkInfo{};
  free_chunks_.push_back(chunk);
  --live_chunks_;
  if (n.chunks.empty()) {
    const uint32_t parent = n.parent;
    RemoveChild(parent, id);
    FreeNode(id);
    // A namespace's root lives while it holds chunks (namespace 0's always).
    if (parent != 0 && IsRoot(nodes_[parent]) && nodes_[parent].children.empty()) {
      roots_.erase(nodes_[parent].ns);
      FreeNode(parent);
    }
  }
  return Status::Ok();
}

std::vector<uint32_t> RadixTree::EvictableChunks() const {
  std::vector<uint32_t> out;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.live && n.children.empty() && !n.chunks.empty()) out.push_back(n.chunks.back());
  }
  return out;
}

std::span<const int32_t> RadixTree::ChunkTokens(uint32_t id) const {
  const ChunkInfo& c = chunks_[id];
  const Node& n = nodes_[c.node];
  return std::span<const int32_t>(n.tokens).subspan(size_t{c.index_in_node} * chunk_, c.tokens);
}

std::span<const uint32_t> RadixTree::NodeChunksOf(uint32_t id) const {
  return nodes_[chunks_[id].node].chunks;
}

uint32_t RadixTree::ParentChunk(uint32_t id) const {
  const ChunkInfo& c = chunks_[id];
  if (c.index_in_node > 0) return nodes_[c.node].chunks[c.index_in_node - 1];
  const uint32_t parent = nodes_[c.node].parent;
  if (parent == kNoNode || IsRoot(nodes_[parent])) return kNoChunk;  // roots hold no chunks
  return nodes_[parent].chunks.back();
}

std::vector<uint32_t> RadixTree::LiveChunks() const {
  std::vector<uint32_t> out;
  out.reserve(live_chunks_);
  for (uint32_t i = 0; i < chunks_.size(); ++i) {
    if (chunks_[i].node != kNoNode) out.push_back(i);
  }
  return out;
}

size_t RadixTree::MemoryBytes() const {
  size_t bytes = nodes_.capacity() * sizeof(Node) + chunks_.capacity() * sizeof(ChunkInfo) +
                 (free_nodes_.capacity() + free_chunks_.capacity()) * sizeof(uint32_t) +
                 roots_.size() * (sizeof(uint64_t) + sizeof(uint32_t) + 2 * sizeof(void*));
  for (const Node& n : nodes_) {
    bytes += n.tokens.capacity() * sizeof(int32_t) + n.chunks.capacity() * sizeof(uint32_t) +
             n.children.capacity() * sizeof(std::pair<uint64_t, uint32_t>);
  }
  return bytes;
}

Status RadixTree::Validate() const {
  auto fail = [](std::string m) { return Status::Corruption("radix tree: " + m); };
  size_t seen_chunks = 0, seen_nodes = 1;
  for (uint32_t id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live) continue;
    ++seen_nodes;
    std::string where = "node " + std::to_string(id) + ": ";
    if (IsRoot(n)) {
      if (n.ns == 0 || RootOf(n.ns) != id) return fail(where + "a root not listed for its namespace");
      if (!n.tokens.empty() || !n.chunks.empty()) return fail(where + "a root holding tokens");
      if (n.children.empty()) return fail(where + "an empty namespace root");
      continue;
    }
    if (n.tokens.empty()) return fail(where + "empty");
    if (n.first_token % chunk_ != 0) return fail(where + "starts off a chunk boundary");
    if (n.chunks.size() != (n.tokens.size() + chunk_ - 1) / chunk_) {
      return fail(where + "chunk count does not match its tokens");
    }
    if (Ends(n) && !n.children.empty()) return fail(where + "partial tail with children");
    if (n.parent == kNoNode || !nodes_[n.parent].live) return fail(where + "dead parent");
    const Node& p = nodes_[n.parent];
    if (n.first_token != p.first_token + p.tokens.size()) return fail(where + "position gap");
    auto& pc = p.children;
    if (std::count_if(pc.begin(), pc.end(), [&](const auto& e) { return e.second == id; }) != 1) {
      return fail(where + "not listed once by its parent");
    }
    uint64_t hash = p.chunks.empty() ? p.ns : chunks_[p.chunks.back()].prefix_hash;
    for (size_t i = 0; i < n.chunks.size(); ++i) {
      const ChunkInfo& c = chunks_[n.chunks[i]];
      if (c.node != id || c.index_in_node != i) return fail(where + "chunk back-link");
      size_t off = i * chunk_;
      size_t len = std::min<size_t>(chunk_, n.tokens.size() - off);
      if (c.tokens != len || c.first_token != n.first_token + off) {
        return fail(where + "chunk span");
      }
      hash = ChainHash(hash, std::span<const int32_t>(n.tokens).subspan(off, len));
      if (c.prefix_hash != hash) return fail(where + "chunk prefix hash");
      ++seen_chunks;
    }
  }
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (!n.live) continue;
    if (!std::is_sorted(n.children.begin(), n.children.end())) return fail("unsorted children");
    for (size_t i = 0; i < n.children.size(); ++i) {
      const auto& [key, child] = n.children[i];
      if (!nodes_[child].live || nodes_[child].parent != id) return fail("child back-link");
      if (key != ChildKey(nodes_[child].tokens)) return fail("stale child key");
      // Two children must not share a whole first chunk: lookups would be ambiguous.
      for (size_t j = i + 1; j < n.children.size(); ++j) {
        const auto& a = nodes_[child].tokens;
        const auto& b = nodes_[n.children[j].second].tokens;
        if (CommonPrefix(a, b) >= chunk_) return fail("children share a first chunk");
      }
    }
  }
  if (seen_nodes != live_nodes_ || seen_chunks != live_chunks_) return fail("live counts");
  return Status::Ok();
}

}  // namespace tierkv::index
