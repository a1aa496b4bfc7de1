// A radix tree over token ids whose edges are split only at chunk boundaries.
//
// Every node holds a token span that starts at a multiple of the chunk size C
// (absolute position in the prompt) and is cut into chunks of C tokens; only a
// leaf's last chunk may be shorter (the partial tail of a prompt, kept rather
// than dropped). A node whose span ends in a partial chunk never has children.
//
// Chunks have dense ids (reused after eviction) and a prefix hash: the xxh3
// chain over every token from position 0 to the chunk's end, seeded with the
// prompt's namespace.
//
// Namespaces: every prompt is stored under a 64-bit namespace (a tenant's;
// 0 is the shared one). Each namespace has its own root, so a lookup never
// matches a prefix stored under another, and its chunks' hashes start from
// the namespace instead of 0 (the first chunk's parent hash is the
// namespace: a store can tell it again from its records). Namespace 0's
// root is node 0 and always exists; another's lives while it holds chunks. A chunk's K/V
// depend on exactly those tokens, so the hash is the chunk's identity on disk
// and stays valid when its node is split. Lookups never trust hashes alone:
// every matched token is compared.
//
// Thread safety: none; the owner (the store) serialises access.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::index {

inline constexpr uint32_t kNoNode = UINT32_MAX;
inline constexpr uint32_t kNoChunk = UINT32_MAX;

// Hash of tokens[0..n) given the hash of the tokens before them (0 at the start).
uint64_t ChainHash(uint64_t seed, std::span<const int32_t> tokens);

struct ChunkInfo {
  uint64_t prefix_hash = 0;  // ChainHash over tokens [0, first_token + tokens)
  uint32_t node = kNoNode;   // kNoNode while the id is free
  uint32_t first_token = 0;  // absolute position of the chunk's first token
  uint16_t tokens = 0;       // 1..C
  uint16_t index_in_node = 0;
};

// The result of a longest-prefix lookup.
struct Match {
  // Verified tokens shared with a stored prefix. May end inside a chunk (the
  // chunk's first rows are then usable, the rest not).
  size_t matched_tokens = 0;
  // The chunks covering [0, matched_tokens), in token order.
  std::vector<uint32_t> chunks;
};

struct InsertResult {
  // Chunks covering every inserted token, in token order (existing and new).
  std::vector<uint32_t> chunks;
  // The subset of `chunks` created by this insert.
  std::vector<uint32_t> created;
};

class RadixTree {
 public:
  // REQUIRES: 1 <= chunk_tokens <= 65535.
  explicit RadixTree(uint32_t chunk_tokens);

  uint32_t chunk_tokens() const { return chunk_; }

  // The longest stored prefix of `tokens` in namespace `ns`.
  Match Lookup(std::span<const int32_t> tokens, uint64_t ns = 0) const;

  // Stores `tokens` so that Lookup(tokens) matches all of them, creating
  // chunks for what no stored prefix covers (splitting a node at a chunk
  // boundary when the new prompt diverges inside it). Nothing is created when
  // a stored prefix already covers every token.
  InsertResult Insert(std::span<const int32_t> tokens, uint64_t ns = 0);

  // The position at which Insert(tokens) would start creating chunks (a
  // multiple of the chunk size), or tokens.size() when it would create none.
  // Lets a writer persist exactly those chunks before publishing them.
  size_t PlanInsert(std::span<const int32_t> tokens, uint64_t ns = 0) const;
  // The namespace of stored chunk `id`'s prompt.
  uint64_t NamespaceOf(uint32_t id) const;

  // A chunk can leave the tree only if it is the last chunk of a node without
  // children, so every stored chunk keeps its whole prefix.
  bool IsEvictable(uint32_t chunk) const;
  // Removes an evictable chunk (and its node when it was the node's only one).
  // InvalidArgument if the chunk is not evictable or not stored.
  Status Evict(uint32_t chunk);
  // Removes `chunk`, the chunks after it in its node and every descendant
  // (used when a chunk turns out corrupt: nothing that depends on it stays).
  // Returns the removed ids (and, if asked, their prefix hashes, in the same
  // order). InvalidArgument if the chunk is not stored.
  Result<std::vector<uint32_t>> Truncate(uint32_t chunk,
                                         std::vector<uint64_t>* prefix_hashes = nullptr);
  // Every currently evictable chunk, for the policy to rank.
  std::vector<uint32_t> EvictableChunks() const;

  bool IsLive(uint32_t chunk) const {
    return chunk < chunks_.size() && chunks_[chunk].node != kNoNode;
  }
  const ChunkInfo& chunk(uint32_t id) const { return chunks_[id]; }
  // The tokens of a stored chunk (a view into its node; invalidated by the
  // next Insert or Evict).
  std::span<const int32_t> ChunkTokens(uint32_t id) const;
  // The chunk just before `id` on its path (covering the C tokens before it),
  // or kNoChunk for a chunk at position 0.
  uint32_t ParentChunk(uint32_t id) const;
  // The chunks of the node holding stored chunk `id`, in token order (a view;
  // invalidated by the next Insert, Evict or Truncate). Reordering works on
  // runs of them: rows shared by exactly the same prompts.
  std::span<const uint32_t> NodeChunksOf(uint32_t id) const;
  // The live chunks' ids, ascending.
  std::vector<uint32_t> LiveChunks() const;

  size_t num_chunks() const { return live_chunks_; }
  size_t num_nodes() const { return live_nodes_; }
  // Heap bytes held by the tree (nodes, tokens, child lists, chunk table).
  size_t MemoryBytes() const;

  // Checks every structural invariant; a description of the first broken one.
  Status Validate() const;

 private:
  struct Node {
    uint64_t ns = 0;  // a root's namespace (the hash seed of its children's first chunks)
    uint32_t parent = kNoNode;
    uint32_t first_token = 0;  // multiple of chunk_
    std::vector<int32_t> tokens;
    std::vector<uint32_t> chunks;
    // (key of the child's first chunk, child), sorted by key; the key hashes
    // the child's first min(C, len) tokens.
    std::vector<std::pair<uint64_t, uint32_t>> children;
    bool live = false;
  };

  uint64_t ChildKey(std::span<const int32_t> first_tokens) const;
  // The child of `node` sharing the longest common prefix with `rest`, and that length.
  std::pair<uint32_t, size_t> BestChild(uint32_t node, std::span<const int32_t> rest) const;
  bool Ends(const Node& n) const;  // a node that ends in a partial chunk
  uint32_t NewNode(uint32_t parent, uint32_t first_token);
  uint32_t NewChunk(uint32_t node, uint16_t index, uint32_t first_token, uint16_t tokens,
                    uint64_t prefix_hash);
  void AddChild(uint32_t parent, uint32_t child);
  void RemoveChild(uint32_t parent, uint32_t child);
  // Cuts node `id` after `keep` tokens (a positive multiple of C); the rest
  // and all children move to a new child node, which is returned.
  uint32_t Split(uint32_t id, size_t keep);
  void FreeNode(uint32_t id);
  uint32_t RootOf(uint64_t ns) const;  // kNoNode when the namespace holds nothing
  uint32_t EnsureRoot(uint64_t ns);
  bool IsRoot(const Node& n) const { return n.parent == kNoNode; }

  uint32_t chunk_;
  std::vector<Node> nodes_;  // nodes_[0] is namespace 0's root (empty span)
  std::unordered_map<uint64_t, uint32_t> roots_;  // the other namespaces' roots
  std::vector<uint32_t> free_nodes_;
  std::vector<ChunkInfo> chunks_;
  std::vector<uint32_t> free_chunks_;
  size_t live_chunks_ = 0;
  size_t live_nodes_ = 1;
};

}  // namespace tierkv::index
