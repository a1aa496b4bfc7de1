#include "store/chunk_store.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <queue>
#include <cmath>
#include <set>
#include <tuple>
#include <sstream>
#include <unordered_map>

#include "store/manifest.h"
#include "tierkv/logging.h"

namespace tierkv::store {
namespace {

bool IsOwnerFile(const StoreOptions& o, const std::string& name) {
  for (const std::string& f : o.owner_files) {
    if (name == f || name == f + ".tmp") return true;
  }
  return false;
}

constexpr const char* kStoreFile = "STORE";
constexpr const char* kStoreMagic = "tierkv-store";
constexpr const char* kManifestFile = "MANIFEST";
constexpr const char* kLockFile = "LOCK";

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// seg-000123.tkv -> 123; 0 if the name is not a segment's.
uint32_t SegmentNumber(const std::string& name) {
  if (name.size() != 14 || name.compare(0, 4, "seg-") != 0 || name.compare(10, 4, ".tkv") != 0) {
    return 0;
  }
  uint32_t n = 0;
  for (size_t i = 4; i < 10; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  return n;
}

std::string StoreIdentity(const StoreOptions& o) {
  std::ostringstream s;
  s << kStoreMagic << " " << kFormatVersion << "\n"
    << "fingerprint " << Hex(o.fingerprint) << "\n"
    << "chunk_tokens " << o.chunk_tokens << "\n"
    << "layers " << o.layers << "\n"
    << "row_bytes " << o.row_bytes << "\n"
    << "dtype " << (o.dtype == KvDtype::kF16 ? "f16" : "f32") << "\n";
  // Only when set, so that stores written without probe copies keep their identity.
  if (o.probe_bytes != 0) s << "probe_bytes " << o.probe_bytes << "\n";
  return s.str();
}

// The identity plus the human-readable model line, which is informative only
// (the fingerprint is what must match).
std::string StoreIdentityFile(const StoreOptions& o) {
  std::string desc = o.model_description;
  std::replace(desc.begin(), desc.end(), '\n', ' ');
  return StoreIdentity(o) + "model " + desc + "\n";
}

// The identity lines of an identity file (everything but "model").
std::string IdentityPart(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.compare(0, 6, "model ") == 0) continue;
    out += line + "\n";
  }
  return out;
}

std::string ValueOf(const std::string& text, const std::string& key);

}  // namespace

Result<StoreOptions> ReadStoreIdentity(FileSystem* fs, const std::string& dir) {
  if (fs == nullptr) fs = FileSystem::Default();
  const std::string path = dir + "/" + kStoreFile;
  auto text = ReadFileToString(fs, path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(dir + " is not a tierkv cache directory (no " + kStoreFile +
                              " identity file)");
    }
    return text.status();
  }
  const std::string& t = *text;
  if (t.compare(0, std::strlen(kStoreMagic), kStoreMagic) != 0) {
    return Status::InvalidArgument(path + ": not a tierkv store identity file");
  }
  StoreOptions o;
  o.dir = dir;
  o.fs = fs;
  auto number = [&](const char* key, uint64_t max) -> Result<uint64_t> {
    const std::string v = ValueOf(t, key);
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n > max) {
      return Status::InvalidArgument(path + ": bad or missing field '" + key + "'");
    }
    return static_cast<uint64_t>(n);
  };
  const std::string fp = ValueOf(t, "fingerprint");
  char* end = nullptr;
  o.fingerprint = std::strtoull(fp.c_str(), &end, 16);
  if (fp.size() != 16 || *end != '\0') {
    return Status::InvalidArgument(path + ": bad or missing field 'fingerprint'");
  }
  ASSIGN_OR_RETURN(uint64_t chunk, number("chunk_tokens", 4096));
  ASSIGN_OR_RETURN(uint64_t layers, number("layers", 65535));
  ASSIGN_OR_RETURN(uint64_t row, number("row_bytes", UINT32_MAX));
  o.chunk_tokens = static_cast<uint32_t>(chunk);
  o.layers = static_cast<uint16_t>(layers);
  o.row_bytes = static_cast<uint32_t>(row);
  const std::string dtype = ValueOf(t, "dtype");
  if (dtype == "f16") {
    o.dtype = KvDtype::kF16;
  } else if (dtype == "f32") {
    o.dtype = KvDtype::kF32;
  } else {
    return Status::InvalidArgument(path + ": bad or missing field 'dtype'");
  }
  if (!ValueOf(t, "probe_bytes").empty()) {
    ASSIGN_OR_RETURN(uint64_t probe, number("probe_bytes", o.row_bytes));
    o.probe_bytes = static_cast<uint32_t>(probe);
  }
  o.model_description = ValueOf(t, "model");
  return o;
}

namespace {

std::string ValueOf(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + " ") == 0) return line.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

ChunkStore::ChunkStore(StoreOptions options)
    : opts_(std::move(options)),
      fs_(opts_.fs ? opts_.fs : FileSystem::Default()),
      tree_(opts_.chunk_tokens) {}

ChunkStore::~ChunkStore() {
  bool dirty;
  {
    std::lock_guard<std::mutex> l(mu_);
    dirty = dirty_;
  }
  if (dirty && !opts_.read_only && opts_.checkpoint_on_close) {
    Status s = Checkpoint();
    if (!s.ok()) {
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": no manifest at close (" << s.ToString()
                        << "); the next open scans the segments";
    }
  }
  if (active_) active_->Close().IgnoreError();
}

std::string ChunkStore::SegmentPath(uint32_t segment) const {
  char name[32];
  std::snprintf(name, sizeof name, "/seg-%06u.tkv", segment);
  return opts_.dir + name;
}

uint64_t ChunkStore::record_bytes(uint32_t tokens) const {
  return uint64_t{kBlockSize} *
         (1 + PagesFor(PayloadBytesFor(RecordKind::kKeyValue, tokens, opts_.row_bytes)));
}

uint64_t ChunkStore::probe_record_bytes(uint32_t tokens) const {
  if (opts_.probe_bytes == 0) return 0;
  return uint64_t{kBlockSize} *
         (1 + PagesFor(PayloadBytesFor(RecordKind::kProbeKeys, tokens, opts_.probe_bytes)));
}

Result<std::unique_ptr<ChunkStore>> ChunkStore::Open(StoreOptions options) {
  if (options.dir.empty()) return Status::InvalidArgument("store: cache directory not set");
  if (options.chunk_tokens < 1 || options.chunk_tokens > 4096) {
    return Status::InvalidArgument("store: chunk_tokens " + std::to_string(options.chunk_tokens) +
                                   " is outside 1..4096");
  }
  if (options.layers < 1) return Status::InvalidArgument("store: layers is 0");
  RETURN_IF_ERROR(CheckGeometry(RecordKind::kKeyValue, options.chunk_tokens, options.row_bytes)
                      .WithContext("store"));
  if (options.probe_bytes > options.row_bytes) {
    return Status::InvalidArgument("store: probe_bytes " + std::to_string(options.probe_bytes) +
                                   " exceeds row_bytes " + std::to_string(options.row_bytes) +
                                   " (probe keys are the start of a K row)");
  }
  if (options.probe_bytes != 0) {
    RETURN_IF_ERROR(CheckGeometry(RecordKind::kProbeKeys, options.chunk_tokens, options.probe_bytes)
                        .WithContext("store probe records"));
  }
  if (options.segment_bytes < (1u << 20)) {
    return Status::InvalidArgument("store: segment_bytes below 1 MiB");
  }
  auto store = std::unique_ptr<ChunkStore>(new ChunkStore(std::move(options)));
  const uint64_t one_chunk =
      store->opts_.layers * (store->record_bytes(store->opts_.chunk_tokens) +
                             store->probe_record_bytes(store->opts_.chunk_tokens));
  if (store->opts_.disk_budget_bytes != 0 && store->opts_.disk_budget_bytes < one_chunk) {
    return Status::InvalidArgument(
        "store: disk budget " + std::to_string(store->opts_.disk_budget_bytes) +
        " bytes is smaller than one token chunk of " + std::to_string(store->opts_.chunk_tokens) +
        " tokens over " + std::to_string(store->opts_.layers) + " layers (" +
        std::to_string(one_chunk) + " bytes)");
  }
  RETURN_IF_ERROR(store->Init());
  return store;
}

Status ChunkStore::Init() {
  ASSIGN_OR_RETURN(io_, NewIoBackend(opts_.io_backend, IoOptions{opts_.queue_depth}));
  for (uint32_t i = 0; i < std::max<uint32_t>(1, opts_.side_readers); ++i) {
    ASSIGN_OR_RETURN(auto side, NewIoBackend(opts_.io_backend, IoOptions{opts_.queue_depth}));
    side_free_.push_back(side.get());
    side_io_.push_back(std::move(side));
  }
  if (opts_.io_arena_bytes >= kBlockSize) {
    arena_bytes_ = opts_.io_arena_bytes / kBlockSize * kBlockSize;
    arena_ = AllocateAligned(arena_bytes_);
    Status reg = io_->RegisterBuffer(arena_.get(), arena_bytes_);
    if (!reg.ok()) {
      // Still correct, only slower: reads then pin pages per request.
      TIERKV_LOG(kInfo) << "store " << opts_.dir << ": read arena not registered with "
                        << io_->name() << " (" << reg.ToString() << ")";
    }
  }
  if (opts_.read_only) {
    if (!fs_->FileExists(opts_.dir)) {
      return Status::NotFound("cache directory " + opts_.dir + " does not exist");
    }
  } else {
    RETURN_IF_ERROR(fs_->CreateDir(opts_.dir).WithContext("cache directory " + opts_.dir));
    // One writer per directory: two would fight over budgets and manifests.
    // (Read-only opens, as `inspect`, take no lock.)
    auto lock = fs_->LockFile(opts_.dir + "/" + kLockFile);
    if (!lock.ok()) {
      if (lock.status().code() == StatusCode::kUnavailable) {
        return Status::Unavailable("cache directory " + opts_.dir +
                                   " is in use by another tierkv store (its LOCK is held); use "
                                   "another directory or stop the other process");
      }
      return lock.status().WithContext("cache directory " + opts_.dir);
    }
    lock_ = std::move(lock).value();
  }
  ASSIGN_OR_RETURN(auto names, fs_->ListDir(opts_.dir));
  const std::string identity_path = opts_.dir + "/" + kStoreFile;
  const std::string identity = StoreIdentity(opts_);
  bool has_identity = false;
  for (const std::string& name : names) {
    if (name == kStoreFile) {
      has_identity = true;
    } else if (SegmentNumber(name) == 0 && name != std::string(kStoreFile) + ".tmp" &&
               name != kManifestFile && name != std::string(kManifestFile) + ".tmp" &&
               name != kLockFile && !IsOwnerFile(opts_, name)) {
      return Status::InvalidArgument("cache directory " + opts_.dir +
                                     " holds a file the store did not write: " + name +
                                     " (use an empty or tierkv-only directory)");
    }
  }
  if (has_identity) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs_, identity_path));
    if (text.compare(0, std::strlen(kStoreMagic), kStoreMagic) != 0) {
      return Status::InvalidArgument(identity_path + ": not a tierkv store identity file");
    }
    if (ValueOf(text, "fingerprint") != Hex(opts_.fingerprint)) {
      return Status::InvalidArgument(
          "cache directory " + opts_.dir + " belongs to another model (fingerprint " +
          ValueOf(text, "fingerprint") + ", this model " + Hex(opts_.fingerprint) +
          "); use another cache directory");
    }
    if (IdentityPart(text) != identity) {
      return Status::InvalidArgument("cache directory " + opts_.dir +
                                     " was written with another geometry (" + identity_path +
                                     " says chunk_tokens " + ValueOf(text, "chunk_tokens") +
                                     ", layers " + ValueOf(text, "layers") + ", row_bytes " +
                                     ValueOf(text, "row_bytes") + ", dtype " +
                                     ValueOf(text, "dtype") + ")");
    }
  } else if (std::any_of(names.begin(), names.end(),
                         [](const std::string& n) { return SegmentNumber(n) != 0; })) {
    return Status::InvalidArgument("cache directory " + opts_.dir +
                                   " holds segments but no STORE identity file");
  } else if (opts_.read_only) {
    return Status::NotFound(opts_.dir + " is not a tierkv cache directory (no STORE identity file)");
  } else {
    RETURN_IF_ERROR(WriteFileAtomically(fs_, identity_path, StoreIdentityFile(opts_)));
  }
  return Recover();
}

Result<std::shared_ptr<RandomAccessFile>> ChunkStore::ReaderFor(uint32_t segment) {
  if (segment < readers_.size() && readers_[segment]) return readers_[segment];
  FileOptions fo;
  fo.direct_io = opts_.direct_io;
  fo.no_follow = true;
  ASSIGN_OR_RETURN(auto file, fs_->NewRandomAccessFile(SegmentPath(segment), fo));
  if (readers_.size() <= segment) readers_.resize(segment + 1);
  readers_[segment] = std::move(file);
  return readers_[segment];
}

Status ChunkStore::Recover() {
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto names, fs_->ListDir(opts_.dir));
  std::vector<uint32_t> segments;
  for (const auto& n : names) {
    if (uint32_t s = SegmentNumber(n)) segments.push_back(s);
  }
  std::sort(segments.begin(), segments.end());

  struct Found {
    uint32_t first_token = 0, tokens = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> token_ids;
    std::vector<Location> where, probe;  // per layer: K/V and probe records
    std::vector<uint64_t> seq, probe_seq;
    bool init = false, consistent = true;
    Placed placed;
  };
  std::unordered_map<uint64_t, Found> found;
  uint64_t skipped = 0, total_bytes = 0;

  // The manifest's snapshot first; then the segments written after it.
  uint32_t log_from = 1;
  uint64_t manifest_chunks = 0, manifest_errors = 0;
  std::vector<uint32_t> garbage;  // below the snapshot and not used by it
  const std::string manifest_path = opts_.dir + "/" + kManifestFile;
  if (fs_->FileExists(manifest_path)) {
    auto text = ReadFileToString(fs_, manifest_path);
    Result<Manifest> m = text.ok() ? DecodeManifest(*text) : Result<Manifest>(text.status());
    if (m.ok() && (m->fingerprint != opts_.fingerprint || m->layers != opts_.layers ||
                   m->chunk_tokens != opts_.chunk_tokens)) {
      m = Status::Corruption("manifest: written for another model or geometry");
    }
    if (!m.ok()) {
      manifest_errors = 1;
      TIERKV_LOG(kWarn) << "store " << opts_.dir << ": " << m.status().ToString()
                        << "; recovering from every segment instead";
    } else {
      log_from = m->log_from;
      sequence_ = std::max(sequence_, m->sequence);
      const std::set<uint32_t> existing(segments.begin(), segments.end());
      std::set<uint32_t> used;
      for (uint32_t seg : m->segments) {
        if (existing.count(seg)) used.insert(seg);
      }
      for (uint32_t seg : segments) {
        if (seg >= log_from) continue;
        if (!used.count(seg)) {
          garbage.push_back(seg);
          continue;
        }
        ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(SegmentPath(seg)));
        total_bytes += size / kBlockSize * kBlockSize;
      }
      for (const ManifestChunk& c : m->chunks) {
        bool ok = true;
        for (const auto& w : c.where) ok = ok && used.count(w.first) > 0;
        if (!ok) continue;  // cannot happen unless files were removed by hand
        Found& f = found[c.prefix_hash];
        f.first_token = c.first_token;
        f.tokens = static_cast<uint32_t>(c.tokens.size());
        f.parent_hash = c.parent_hash;
        f.token_ids = c.tokens;
        f.where.clear();
        for (const auto& w : c.where) f.where.push_back(Location{w.first, w.second});
        f.seq.assign(opts_.layers, 0);  // any copy in the log is newer
        f.probe.assign(opts_.layers, Location{});
        f.probe_seq.assign(opts_.layers, 0);
        if (c.probe_block != kNoProbe && opts_.probe_bytes != 0) {
          for (uint16_t l = 0; l < opts_.layers; ++l) {
            f.probe[l] = Location{f.where[0].segment, c.probe_block + l * uint32_t{c.probe_stride}};
          }
        }
        f.init = true;
        ++manifest_chunks;
      }
    }
  }
  if (!garbage.empty() && !opts_.read_only) {
    // Left by a compaction that wrote its manifest but crashed before deleting.
    for (uint32_t seg : garbage) {
      TIERKV_LOG(kInfo) << "store " << opts_.dir << ": removing " << SegmentPath(seg)
                        << " (no longer used since the last compaction)";
      RETURN_IF_ERROR(fs_->DeleteFile(SegmentPath(seg)));
    }
    RETURN_IF_ERROR(fs_->SyncDir(opts_.dir));
  }
  uint64_t scanned = 0;

  const size_t window = 4u << 20;
  AlignedBuffer buf = AllocateAligned(window);
  size_t buf_size = window;
  for (uint32_t seg : segments) {
    if (seg < log_from) continue;
    ++scanned;
    std::lock_guard<std::mutex> l(mu_);
    auto reader = ReaderFor(seg);
    if (!reader.ok()) return reader.status().WithContext("store recovery");
    const RandomAccessFile* file = reader->get();
    ASSIGN_OR_RETURN(uint64_t size, file->Size());
    total_bytes += size / kBlockSize * kBlockSize;
    uint64_t win_start = 0, win_len = 0, cursor = 0;
    auto fill = [&](uint64_t at, size_t need) -> Status {
      if (need > buf_size) {
        buf = AllocateAligned(need);
        buf_size = need;
      }
      ReadOp op{file, at, std::min<uint64_t>(buf_size, size - at), buf.get()};
      op.length = (op.length + kBlockSize - 1) / kBlockSize * kBlockSize;
      std::lock_guard<std::mutex> io(io_mu_);
      RETURN_IF_ERROR(io_->Read(std::span<ReadOp>(&op, 1)));
      RETURN_IF_ERROR(op.status);
      win_start = at;
      win_len = op.done / kBlockSize * kBlockSize;
      return Status::Ok();
    };
    while (cursor + kBlockSize <= size) {
      if (cursor < win_start || cursor + kBlockSize > win_start + win_len) {
        RETURN_IF_ERROR(fill(cursor, window).WithContext("store recovery, " + SegmentPath(seg)));
        if (win_len < kBlockSize) break;
      }
      const char* block = buf.get() + (cursor - win_start);
      auto header = DecodeHeader(std::span<const char, kBlockSize>(block, kBlockSize));
      if (!header.ok()) {
        // Not a record start (torn write, garbage): resynchronise at the next block.
        ++skipped;
        cursor += kBlockSize;
        continue;
      }
      const RecordHeader& h = *header;
      const uint64_t len = uint64_t{kBlockSize} * (1 + h.page_checksums.size());
      if (cursor + len > size) {
        ++skipped;  // torn tail
        break;
      }
      if (cursor + len > win_start + win_len) {
        RETURN_IF_ERROR(fill(cursor, std::max<size_t>(window, len)));
        block = buf.get();
      }
      bool pages_ok = true;
      for (uint32_t p = 0; p < h.page_checksums.size() && pages_ok; ++p) {
        pages_ok = PageChecksumOk(h, p, {block + kBlockSize * (1 + size_t{p}), kBlockSize});
      }
      const bool probe = h.kind == RecordKind::kProbeKeys;
      bool ours = h.fingerprint == opts_.fingerprint &&
                  (h.kind == RecordKind::kKeyValue || (probe && opts_.probe_bytes != 0)) &&
                  h.layer < opts_.layers &&
                  h.row_bytes == (probe ? opts_.probe_bytes : opts_.row_bytes) &&
                  h.dtype == opts_.dtype && h.token_count <= opts_.chunk_tokens &&
                  h.first_token % opts_.chunk_tokens == 0;
      if (pages_ok && h.fingerprint == opts_.fingerprint &&
          h.kind == RecordKind::kReorderedKeyValue) {
        cursor += len;  // a reordered copy: layouts are not recovered (dead bytes)
        continue;
      }
      if (!pages_ok || !ours) {
        ++skipped;
        cursor += pages_ok ? len : kBlockSize;
        continue;
      }
      Found& f = found[h.prefix_hash];
      if (!f.init) {
        f.init = true;
        f.first_token = h.first_token;
        f.tokens = h.token_count;
        f.parent_hash = h.parent_hash;
        f.token_ids = h.tokens;
        f.where.assign(opts_.layers, Location{});
        f.seq.assign(opts_.layers, 0);
        f.probe.assign(opts_.layers, Location{});
        f.probe_seq.assign(opts_.layers, 0);
      } else if (f.first_token != h.first_token || f.tokens != h.token_count ||
                 f.parent_hash != h.parent_hash || f.token_ids != h.tokens) {
        f.consistent = false;  // a hash collision or a forged record: use none of it
      }
      const Location here{seg, static_cast<uint32_t>(cursor / kBlockSize)};
      if (probe && h.sequence >= f.probe_seq[h.layer]) {
        f.probe_seq[h.layer] = h.sequence;
        f.probe[h.layer] = here;
      } else if (!probe && h.sequence >= f.seq[h.layer]) {
        f.seq[h.layer] = h.sequence;
        f.where[h.layer] = here;
      }
      sequence_ = std::max(sequence_, h.sequence);
      cursor += len;
    }
  }

  // A chunk is usable when every layer is present and its parent chain is.
  auto complete = [&](const Found& f) {
    if (!f.consistent) return false;
    for (const Location& w : f.where) {
      if (w.segment == 0) return false;
    }
    return true;
  };
  std::unordered_map<uint64_t, int> usable;  // -1 no, 1 yes
  std::function<bool(uint64_t)> chain_ok = [&](uint64_t hash) -> bool {
    auto u = usable.find(hash);
    if (u != usable.end()) return u->second > 0;
    auto it = found.find(hash);
    bool ok = false;
    if (it != found.end() && complete(it->second)) {
      const Found& f = it->second;
      if (f.parent_hash == 0) {
        ok = f.first_token == 0;
      } else {
        auto p = found.find(f.parent_hash);
        ok = p != found.end() && p->second.tokens == opts_.chunk_tokens &&
             p->second.first_token + p->second.tokens == f.first_token && chain_ok(f.parent_hash);
      }
    }
    usable[hash] = ok ? 1 : -1;
    return ok;
  };
  std::unordered_map<uint64_t, bool> is_parent;
  for (auto& [hash, f] : found) {
    if (chain_ok(hash) && f.parent_hash != 0) is_parent[f.parent_hash] = true;
    // The probe copy is used when every layer's is there, in layer 0's
    // segment, at a constant stride (as Put and compaction write them);
    // otherwise the chunk's probe keys are sliced from its K records.
    f.placed.where = f.where;
    if (!f.probe.empty() && !f.where.empty() && opts_.probe_bytes != 0) {
      const int64_t stride = opts_.layers > 1 ? int64_t{f.probe[1].block} - f.probe[0].block : 0;
      bool ok = stride >= 0 && stride <= UINT16_MAX;
      for (uint16_t l = 0; l < opts_.layers && ok; ++l) {
        ok = f.probe[l].segment != 0 && f.probe[l].segment == f.where[0].segment &&
             f.probe[l].block == f.probe[0].block + l * stride;
      }
      if (ok) {
        f.placed.probe_block = f.probe[0].block;
        f.placed.probe_stride = static_cast<uint16_t>(stride);
      }
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  uint64_t recovered = 0;
  // Insert every leaf's whole prompt, shortest first (deterministic ids).
  std::vector<uint64_t> leaves;
  for (const auto& [hash, f] : found) {
    if (usable[hash] > 0 && !is_parent.count(hash)) leaves.push_back(hash);
  }
  std::sort(leaves.begin(), leaves.end(), [&](uint64_t a, uint64_t b) {
    const Found &fa = found[a], &fb = found[b];
    return std::tie(fa.first_token, fa.tokens, a) < std::tie(fb.first_token, fb.tokens, b);
  });
  for (uint64_t leaf : leaves) {
    std::vector<const Found*> chain;
    for (uint64_t h = leaf; h != 0; h = found[h].parent_hash) chain.push_back(&found[h]);
    std::vector<int32_t> prompt;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      prompt.insert(prompt.end(), (*it)->token_ids.begin(), (*it)->token_ids.end());
    }
    index::InsertResult r = tree_.Insert(prompt);
    ASSIGN_OR_RETURN(Published p, PublishLocked(r.created, [&](uint64_t hash) {
                       auto it = found.find(hash);
                       return it == found.end() ? nullptr : &it->second.placed;
                     }));
    recovered += p.chunks;
  }
  dead_bytes_ = total_bytes > live_bytes_ ? total_bytes - live_bytes_ : 0;
  active_segment_ = segments.empty() ? 0 : segments.back();
  segment_count_ = segments.size() - (opts_.read_only ? 0 : garbage.size());
  if (scanned > 0) dirty_ = true;  // so that the next open need not scan them again
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.recovered_chunks = recovered;
    stats_.manifest_chunks = manifest_chunks;
    stats_.manifest_errors = manifest_errors;
    stats_.scanned_segments = scanned;
    stats_.skipped_records = skipped;
    stats_.recovery_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  if (skipped > 0) {
    TIERKV_LOG(kWarn) << "store " << opts_.dir << ": recovery skipped " << skipped
                      << " unusable blocks or records (torn writes, corruption, other models)";
  }
  return Status::Ok();
}

Status ChunkStore::OpenSegmentForAppend() {
  // A new segment per process and whenever one is full: never append after a
  // possibly torn tail.
  if (active_) {
    RETURN_IF_ERROR(active_->Close());
    active_.reset();
  }
  uint32_t next = active_segment_ + 1;
  ASSIGN_OR_RETURN(active_, fs_->NewWritableFile(SegmentPath(next), /*truncate=*/true));
  active_segment_ = next;
  ++segment_count_;
  RETURN_IF_ERROR(fs_->SyncDir(opts_.dir));
  return Status::Ok();
}

void ChunkStore::DropLocked(uint32_t chunk, bool corrupt) {
  std::vector<uint64_t> hashes;
  auto removed = tree_.Truncate(chunk, &hashes);
  if (!removed.ok()) return;
  dirty_ = true;
  for (size_t i = 0; i < removed->size(); ++i) {
    const uint32_t id = (*removed)[i];
    // The bytes stay in their segment (dead) until compaction.
    const uint64_t bytes = ChunkBytesLocked(id);
    live_bytes_ -= bytes;
    dead_bytes_ += bytes;
    ClearLocations(id);
    ForgetChunkLocked(id, hashes[i]);
  }
  std::lock_guard<std::mutex> s(stats_mu_);
  if (corrupt) stats_.dropped_chunks += removed->size();
}

void ChunkStore::TouchLocked(uint32_t chunk) {
  // value_ holds log2(v) + t / H for a count v that halves every H accesses
  // (t: the store's access clock); comparing these compares the decayed
  // counts at any common time without updating every chunk.
  const double now = static_cast<double>(++clock_);
  if (opts_.eviction_half_life == 0) {
    value_[chunk] = now;  // pure recency
    return;
  }
  const double h = static_cast<double>(opts_.eviction_half_life);
  const double rel = value_[chunk] - now / h;  // log2 of the decayed count now
  value_[chunk] = (rel < -60 ? 0.0 : std::log2(std::exp2(rel) + 1.0)) + now / h;
}

Status ChunkStore::EvictForLocked(uint64_t bytes) {
  if (opts_.disk_budget_bytes == 0 || live_bytes_ + bytes <= opts_.disk_budget_bytes) {
    return Status::Ok();
  }
  // Least valuable evictable leaf tail first. One scan of the tree for the
  // candidates; each eviction may expose the chunk before it as a new tail.
  using Entry = std::pair<double, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t c : tree_.EvictableChunks()) heap.emplace(value_[c], c);
  while (live_bytes_ + bytes > opts_.disk_budget_bytes) {
    if (heap.empty()) return Status::ResourceExhausted("store: disk budget full");
    const auto [value, victim] = heap.top();
    heap.pop();
    if (!tree_.IsEvictable(victim) || value_[victim] != value) continue;  // stale entry
    const uint32_t before = tree_.ParentChunk(victim);
    const uint64_t freed = ChunkBytesLocked(victim);
    const uint64_t hash = tree_.chunk(victim).prefix_hash;
    RETURN_IF_ERROR(tree_.Evict(victim));
    ClearLocations(victim);
    ForgetChunkLocked(victim, hash);
    live_bytes_ -= freed;
    dead_bytes_ += freed;
    dirty_ = true;
    if (before != index::kNoChunk && tree_.IsEvictable(before)) heap.emplace(value_[before], before);
    std::lock_guard<std::mutex> s(stats_mu_);
    ++stats_.evicted_chunks;
  }
  return Status::Ok();
}

Result<PutResult> ChunkStore::Put(std::span<const int32_t> tokens, const KvInput& kv) {
  if (opts_.read_only) return Status::InvalidArgument("store put: the store was opened read-only");
  if (kv.k.size() != opts_.layers || kv.v.size() != opts_.layers) {
    return Status::InvalidArgument("store put: K/V for " + std::to_string(kv.k.size()) + "/" +
                                   std::to_string(kv.v.size()) + " layers, the store has " +
                                   std::to_string(opts_.layers));
  }
  if (kv.first_row > tokens.size()) {
    return Status::InvalidArgument("store put: first_row " + std::to_string(kv.first_row) +
                                   " is past the prompt's " + std::to_string(tokens.size()) +
                                   " tokens");
  }
  const size_t want = (tokens.size() - kv.first_row) * opts_.row_bytes;
  for (uint16_t l = 0; l < opts_.layers; ++l) {
    if (kv.k[l].size() != want || kv.v[l].size() != want) {
      return Status::InvalidArgument("store put: layer " + std::to_string(l) + " K/V holds " +
                                     std::to_string(kv.k[l].size()) + "/" +
                                     std::to_string(kv.v[l].size()) + " bytes, expected " +
                                     std::to_string(want));
    }
  }
  std::lock_guard<std::mutex> w(write_mu_);
  PutResult out;
  const uint32_t C = opts_.chunk_tokens;
  size_t start = 0, end = tokens.size();
  uint64_t parent_hash = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    // The prompt's own stored prefix is the most recent: evicted last.
    for (uint32_t id : tree_.Lookup(tokens).chunks) TouchLocked(id);
    // Evict until the new chunks fit. Eviction may still take the prompt's
    // own stored tail (when nothing else is left), so plan again after each
    // round until the plan holds.
    for (;;) {
      start = tree_.PlanInsert(tokens);
      end = tokens.size();
      if (start < kv.first_row) {
        // The rows the plan needs were not given (a caller that loaded only
        // some of the prefix): store nothing rather than guess them.
        end = start;
        break;
      }
      uint64_t need = 0;
      for (size_t p = start; p < end; p += C) {
        const uint32_t n = static_cast<uint32_t>(std::min<size_t>(C, end - p));
        need += opts_.layers * (record_bytes(n) + probe_record_bytes(n));
      }
      if (need == 0) break;
      if (EvictForLocked(need).ok()) {
        if (tree_.PlanInsert(tokens) == start) break;
        continue;  // our own prefix shrank: more to write
      }
      // Even an empty disk tier cannot hold all of it: store the prefix that fits.
      start = tree_.PlanInsert(tokens);
      if (start < kv.first_row) {
        end = start;
        break;
      }
      uint64_t room = opts_.disk_budget_bytes > live_bytes_ ? opts_.disk_budget_bytes - live_bytes_ : 0;
      size_t fit = start;
      while (fit < end) {
        const uint32_t n = static_cast<uint32_t>(std::min<size_t>(C, end - fit));
        const uint64_t b = opts_.layers * (record_bytes(n) + probe_record_bytes(n));
        if (b > room) break;
        room -= b;
        fit = std::min(end, fit + C);
      }
      end = fit;
      break;
    }
    if (start > 0 && start < end) {
      index::Match m = tree_.Lookup(tokens.first(start));
      if (m.matched_tokens != start || m.chunks.empty()) {
        return Status::Corruption("store put: the plan and the index disagree");  // never expected
      }
      parent_hash = tree_.chunk(m.chunks.back()).prefix_hash;
    }
  }
  if (start >= end) {
    std::lock_guard<std::mutex> l(mu_);
    out.stored_tokens = tree_.Lookup(tokens).matched_tokens;
    return out;
  }

  // Write the new chunks' records, then make them durable. Chunks go in
  // batches that fit the active segment: each chunk's K/V layers back to
  // back, then the batch's probe records layer by layer, so that one layer's
  // probe keys of consecutive chunks are one contiguous read.
  constexpr size_t kProbeBatchChunks = 16;
  struct Written {
    uint64_t prefix_hash;
    Placed placed;
  };
  std::vector<Written> written;
  std::string record, payload;
  uint64_t hash = parent_hash;
  Status s;
  auto encode = [&](RecordKind kind, uint16_t layer, size_t p, uint32_t n, uint64_t parent,
                    uint64_t prefix_hash) {
    RecordHeader h;
    h.fingerprint = opts_.fingerprint;
    h.kind = kind;
    h.dtype = opts_.dtype;
    h.layer = layer;
    h.first_token = static_cast<uint32_t>(p);
    h.token_count = n;
    h.row_bytes = kind == RecordKind::kProbeKeys ? opts_.probe_bytes : opts_.row_bytes;
    h.prefix_hash = prefix_hash;
    h.parent_hash = parent;
    h.sequence = ++sequence_;
    h.tokens.assign(tokens.begin() + p, tokens.begin() + p + n);
    EncodeRecord(h, payload, &record);
  };
  size_t p = start;
  while (p < end && s.ok()) {
    if (!active_) {
      s = OpenSegmentForAppend();
      if (!s.ok()) break;
    }
    // Plan the batch (at least one chunk; a new segment if it does not fit).
    std::vector<uint32_t> ns;
    uint64_t batch = 0;
    for (size_t q = p; q < end && ns.size() < kProbeBatchChunks;) {
      const uint32_t n = static_cast<uint32_t>(std::min<size_t>(C, end - q));
      const uint64_t b = opts_.layers * (record_bytes(n) + probe_record_bytes(n));
      if (!ns.empty() && active_->Size() + batch + b > opts_.segment_bytes) break;
      ns.push_back(n);
      batch += b;
      q += n;
    }
    if (active_->Size() > 0 && active_->Size() + batch > opts_.segment_bytes) {
      s = OpenSegmentForAppend();
      continue;  // plan again for the empty segment
    }
    const size_t batch_start = written.size();
    std::vector<uint64_t> parents;
    for (uint32_t n : ns) {
      const uint64_t parent = hash;
      hash = index::ChainHash(hash, tokens.subspan(p, n));
      parents.push_back(parent);
      Written wr{hash, Placed{std::vector<Location>(opts_.layers)}};
      for (uint16_t layer = 0; layer < opts_.layers && s.ok(); ++layer) {
        const size_t bytes = size_t{n} * opts_.row_bytes;
        payload.assign(kv.k[layer].data() + (p - kv.first_row) * opts_.row_bytes, bytes);
        payload.append(kv.v[layer].data() + (p - kv.first_row) * opts_.row_bytes, bytes);
        encode(RecordKind::kKeyValue, layer, p, n, parent, hash);
        wr.placed.where[layer] =
            Location{active_segment_, static_cast<uint32_t>(active_->Size() / kBlockSize)};
        s = active_->Append(record);
        out.bytes_written += record.size();
      }
      written.push_back(std::move(wr));
      p += n;
    }
    if (opts_.probe_bytes != 0 && s.ok()) {
      uint64_t stride = 0;
      for (uint32_t n : ns) stride += probe_record_bytes(n) / kBlockSize;
      for (uint16_t layer = 0; layer < opts_.layers && s.ok(); ++layer) {
        size_t q = p;
        for (uint32_t n : ns) q -= n;
        for (size_t j = 0; j < ns.size() && s.ok(); ++j) {
          payload.clear();
          for (uint32_t t = 0; t < ns[j]; ++t) {
            payload.append(kv.k[layer].data() + (q + t - kv.first_row) * opts_.row_bytes,
                           opts_.probe_bytes);
          }
          encode(RecordKind::kProbeKeys, layer, q, ns[j], parents[j],
                 written[batch_start + j].prefix_hash);
          if (layer == 0) {
            Placed& pl = written[batch_start + j].placed;
            pl.probe_block = static_cast<uint32_t>(active_->Size() / kBlockSize);
            pl.probe_stride = static_cast<uint16_t>(stride);
          }
          s = active_->Append(record);
          out.bytes_written += record.size();
          q += ns[j];
        }
      }
    }
  }
  if (s.ok()) s = active_->Sync();
  if (!s.ok()) {
    // Nothing is published; the next Put starts a fresh segment after the
    // possibly partial records (recovery skips them).
    if (active_) active_->Close().IgnoreError();
    active_.reset();
    std::lock_guard<std::mutex> l(mu_);
    dead_bytes_ += out.bytes_written;
    return s.WithContext("store put");
  }

  // Publish.
  std::lock_guard<std::mutex> l(mu_);
  index::InsertResult r = tree_.Insert(tokens.first(end));
  std::unordered_map<uint64_t, const Written*> by_hash;
  for (const Written& wr : written) by_hash[wr.prefix_hash] = &wr;
  ASSIGN_OR_RETURN(Published pub, PublishLocked(r.created, [&](uint64_t hash) {
                     auto it = by_hash.find(hash);
                     return it == by_hash.end() ? nullptr : &it->second->placed;
                   }));
  out.new_chunks = pub.chunks;
  dead_bytes_ += out.bytes_written - pub.bytes;
  dirty_ = true;
  out.stored_tokens = tree_.Lookup(tokens).matched_tokens;
  std::lock_guard<std::mutex> st(stats_mu_);
  ++stats_.puts;
  stats_.records_written += written.size() * opts_.layers * (opts_.probe_bytes != 0 ? 2 : 1);
  stats_.bytes_written += out.bytes_written;
  return out;
}

LookupResult ChunkStore::Lookup(std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> l(mu_);
  index::Match m = tree_.Lookup(tokens);
  LookupResult out;
  out.matched_tokens = m.matched_tokens;
  out.chunks = std::move(m.chunks);
  for (uint32_t id : out.chunks) {
    out.chunk_tokens.push_back(tree_.chunk(id).tokens);
    out.prefix_hashes.push_back(tree_.chunk(id).prefix_hash);
  }
  return out;
}

Result<ChunkStore::Published> ChunkStore::PublishLocked(
    const std::vector<uint32_t>& created,
    const std::function<const Placed*(uint64_t)>& where_of) {
  Published out;
  for (uint32_t id : created) {
    const Placed* where = where_of(tree_.chunk(id).prefix_hash);
    if (where == nullptr) {
      // The tree changed between plan and publish (a concurrent drop), or a
      // recovered chain is short: never leave a chunk without data indexed.
      RETURN_IF_ERROR(tree_.Truncate(id).status());
      break;
    }
    if (value_.size() < size_t{id} + 1) {
      value_.resize(id + 1);
      chunk_tokens_.resize(id + 1);
    }
    chunk_tokens_[id] = tree_.chunk(id).tokens;
    SetLocations(id, where->where);
    if (probe_block_.size() <= id) {
      probe_block_.resize(size_t{id} + 1, kNoProbe);
      probe_stride_.resize(size_t{id} + 1, 0);
    }
    probe_block_[id] = opts_.probe_bytes != 0 ? where->probe_block : kNoProbe;
    probe_stride_[id] = where->probe_stride;
    value_[id] = 0;
    TouchLocked(id);
    const uint64_t bytes = ChunkBytesLocked(id);
    live_bytes_ += bytes;
    out.bytes += bytes;
    ++out.chunks;
  }
  return out;
}

uint32_t ChunkStore::Run::RecordTokens(uint32_t i) const {
  return std::min(chunk_tokens, rows - i * chunk_tokens);
}

Result<RecordHeader> ChunkStore::CheckHeader(const char* block0, const Expect& e) const {
  auto h = DecodeHeader(std::span<const char, kBlockSize>(block0, kBlockSize));
  if (!h.ok()) return h.status();
  if (h->fingerprint != opts_.fingerprint || h->kind != e.kind || h->layer != e.layer ||
      h->prefix_hash != e.prefix_hash || h->first_token != e.first_token ||
      h->token_count != e.tokens ||
      h->row_bytes != (e.row_bytes != 0 ? e.row_bytes : opts_.row_bytes) ||
      h->dtype != opts_.dtype) {
    return Status::Corruption("record identity does not match the chunk it was read for");
  }
  if (e.run != nullptr) {
    // A reordered record names the original position of each of its rows;
    // each must sit exactly where the mapping list says.
    const uint32_t base = e.run_record * opts_.chunk_tokens;
    for (uint32_t j = 0; j < h->token_count; ++j) {
      const int64_t row = int64_t{h->tokens[j]} - e.run->first_token;
      if (row < 0 || row >= e.run->rows ||
          e.run->map.SlotOf(e.layer, static_cast<uint32_t>(row)) != base + j) {
        return Status::Corruption("reordered record's row positions disagree with its mapping list");
      }
    }
  }
  return h;
}

Status ChunkStore::VerifyRecord(const char* record, const Expect& e) const {
  ASSIGN_OR_RETURN(RecordHeader h, CheckHeader(record, e));
  for (uint32_t pg = 0; pg < h.page_checksums.size(); ++pg) {
    if (!PageChecksumOk(h, pg, {record + kBlockSize * (1 + size_t{pg}), kBlockSize})) {
      return Status::Corruption("payload page " + std::to_string(pg) + " checksum mismatch");
    }
  }
  return Status::Ok();
}

Status ChunkStore::VerifyRecord(const char* record, uint16_t layer, uint64_t prefix_hash,
                                uint32_t first_token, uint32_t tokens) const {
  Expect e;
  e.layer = layer;
  e.prefix_hash = prefix_hash;
  e.first_token = first_token;
  e.tokens = tokens;
  return VerifyRecord(record, e);
}

Status ChunkStore::Read(std::span<ChunkRead> reads, RowReadStats* out_stats) {
  struct Pending {
    ChunkRead* read;
    Location where;
    uint64_t prefix_hash;
    uint32_t first_token, tokens;
    uint64_t len;
    std::shared_ptr<RandomAccessFile> file;
    Status status;
    uint64_t done = 0;
  };
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (ChunkRead& r : reads) {
      if (r.layer >= opts_.layers) {
        r.status = Status::InvalidArgument("store read: layer " + std::to_string(r.layer) +
                                           " of " + std::to_string(opts_.layers));
        continue;
      }
      if (!tree_.IsLive(r.chunk) || tree_.chunk(r.chunk).prefix_hash != r.prefix_hash) {
        r.status = Status::NotFound("store read: chunk " + std::to_string(r.chunk) + " not stored");
        continue;
      }
      const index::ChunkInfo& c = tree_.chunk(r.chunk);
      Location where = LocationOf(r.chunk, r.layer);
      auto file = ReaderFor(where.segment);
      if (!file.ok()) {
        r.status = file.status();
        continue;
      }
      TouchLocked(r.chunk);
      pending.push_back(Pending{&r, where, c.prefix_hash, c.first_token, c.tokens,
                                record_bytes(c.tokens), *file});
    }
  }
  // Demand reads first, then prefetches; in slices that fit the staging
  // arena (registered with io_uring, so no page pinning per read). Records
  // are verified and copied out while the arena is ours.
  std::stable_partition(pending.begin(), pending.end(),
                        [](const Pending& p) { return !p.read->prefetch; });
  uint64_t ios = 0, pages = 0;
  for (size_t i = 0; i < pending.size();) {
    std::lock_guard<std::mutex> io(io_mu_);
    std::vector<ReadOp> ops;
    std::vector<AlignedBuffer> own;  // a record larger than the whole arena
    size_t j = i;
    uint64_t used = 0;
    for (; j < pending.size(); ++j) {
      Pending& p = pending[j];
      char* buf = nullptr;
      if (arena_ && used + p.len <= arena_bytes_) {
        buf = arena_.get() + used;
        used += p.len;
      } else if (j == i) {
        own.push_back(AllocateAligned(p.len));
        buf = own.back().get();
      } else {
        break;
      }
      ReadOp op;
      op.file = p.file.get();
      op.offset = uint64_t{p.where.block} * kBlockSize;
      op.length = p.len;
      op.buf = buf;
      op.prefetch = p.read->prefetch;
      ops.push_back(op);
      if (!own.empty()) {
        ++j;
        break;
      }
    }
    RETURN_IF_ERROR(io_->Read(ops));
    ios += ops.size();
    for (size_t k = 0; k < ops.size(); ++k) {
      Pending& p = pending[i + k];
      const ReadOp& op = ops[k];
      ChunkRead& r = *p.read;
      p.done = op.done;
      pages += op.length / kBlockSize - 1;
      Status s = op.status;
      if (s.ok() && op.done < op.length) s = Status::Corruption("record cut short at end of segment");
      if (s.ok()) s = VerifyRecord(op.buf, r.layer, p.prefix_hash, p.first_token, p.tokens);
      if (s.ok()) {
        const size_t half = size_t{p.tokens} * opts_.row_bytes;
        if (r.k) std::memcpy(r.k, op.buf + kBlockSize, half);
        if (r.v) std::memcpy(r.v, op.buf + kBlockSize + half, half);
      }
      p.status = s;
    }
    i = j;
  }
  // Failures are handled after the I/O lock is released (the index lock is
  // never taken under it).
  uint64_t bytes = 0, records = 0, corrupt = 0, errors = 0;
  for (Pending& p : pending) {
    ChunkRead& r = *p.read;
    bytes += p.done;
    if (p.status.ok()) {
      ++records;
      r.status = Status::Ok();
      continue;
    }
    std::string where = SegmentPath(p.where.segment) + " block " + std::to_string(p.where.block);
    r.status = p.status.WithContext("chunk " + std::to_string(r.chunk) + " layer " +
                                    std::to_string(r.layer) + " at " + where);
    if (p.status.IsCorruption()) {
      ++corrupt;
      TIERKV_LOG(kWarn) << "store: " << r.status.ToString()
                        << "; the chunk and its descendants leave the index";
      std::lock_guard<std::mutex> l(mu_);
      // Only if the chunk still is what was read (ids are reused).
      if (tree_.IsLive(r.chunk) && tree_.chunk(r.chunk).prefix_hash == p.prefix_hash) {
        DropLocked(r.chunk, /*corrupt=*/true);
      }
    } else {
      ++errors;
    }
  }
  if (out_stats) {
    *out_stats = RowReadStats{};
    out_stats->records = pending.size();
    out_stats->ios = ios;
    out_stats->pages = pages;
    out_stats->bytes = bytes;
  }
  std::lock_guard<std::mutex> st(stats_mu_);
  stats_.records_read += records;
  stats_.bytes_read += bytes;
  stats_.corrupt_records += corrupt;
  stats_.read_errors += errors;
  return Status::Ok();
}

Status ChunkStore::ReadRows(std::span<RowRead> reads, RowReadStats* out_stats) {
  const uint32_t C = opts_.chunk_tokens;
  const uint64_t rb = opts_.row_bytes;
  // One entry per distinct record touched; rows of several reads may share it.
  struct Rec {
    Location where;
    std::shared_ptr<RandomAccessFile> file;
    Expect expect;
    std::shared_ptr<const Run> run;  // set for a reordered record
    uint32_t chunk = index::kNoChunk;  // set for a chunk's own record
    std::vector<bool> pages;           // payload pages needed
    bool demand = false;
    AlignedBuffer buf;
    Status status;
  };
  struct Target {
    size_t rec;
    uint32_t row;  // row within the record
  };
  std::vector<Rec> recs;
  std::map<std::pair<uint32_t, uint32_t>, size_t> rec_at;
  std::vector<std::vector<Target>> targets(reads.size());
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < reads.size(); ++i) {
      RowRead& r = reads[i];
      r.status = Status::Ok();
      if (r.layer >= opts_.layers) {
        r.status = Status::InvalidArgument("store row read: layer " + std::to_string(r.layer) +
                                           " of " + std::to_string(opts_.layers));
        continue;
      }
      if (r.k == nullptr && r.v == nullptr) {
        r.status = Status::InvalidArgument("store row read: neither K nor V requested");
        continue;
      }
      if (!tree_.IsLive(r.chunk) || tree_.chunk(r.chunk).prefix_hash != r.prefix_hash) {
        r.status = Status::NotFound("store row read: chunk " + std::to_string(r.chunk) + " not stored");
        continue;
      }
      const index::ChunkInfo& c = tree_.chunk(r.chunk);
      for (size_t j = 0; j < r.rows.size(); ++j) {
        if (r.rows[j] >= c.tokens || (j > 0 && r.rows[j] <= r.rows[j - 1])) {
          r.status = Status::InvalidArgument(
              "store row read: rows must ascend and be below the chunk's " +
              std::to_string(c.tokens) + " tokens (row " + std::to_string(r.rows[j]) + ")");
          break;
        }
      }
      if (!r.status.ok()) continue;
      auto run_it = run_of_.find(r.chunk);
      std::shared_ptr<const Run> run = run_it == run_of_.end() ? nullptr : run_it->second;
      TouchLocked(r.chunk);
      targets[i].reserve(r.rows.size());
      for (uint32_t row : r.rows) {
        Location where;
        uint32_t rec_row = row, rec_tokens = c.tokens, run_record = 0;
        if (run) {
          const uint32_t slot = run->map.SlotOf(r.layer, c.first_token + row - run->first_token);
          run_record = slot / C;
          rec_row = slot % C;
          rec_tokens = run->RecordTokens(run_record);
          where = run->where[size_t{r.layer} * run->records + run_record];
        } else {
          where = LocationOf(r.chunk, r.layer);
        }
        auto [it, fresh] = rec_at.try_emplace({where.segment, where.block}, recs.size());
        if (fresh) {
          Rec rec;
          rec.where = where;
          auto file = ReaderFor(where.segment);
          if (!file.ok()) {
            rec_at.erase(it);
            r.status = file.status();
            break;
          }
          rec.file = *file;
          rec.expect.layer = r.layer;
          if (run) {
            rec.expect.kind = RecordKind::kReorderedKeyValue;
            rec.expect.prefix_hash = run->end_hash;
            rec.expect.first_token = run->first_token;
            rec.expect.run = run.get();
            rec.expect.run_record = run_record;
            rec.run = run;
          } else {
            rec.expect.prefix_hash = c.prefix_hash;
            rec.expect.first_token = c.first_token;
            rec.chunk = r.chunk;
          }
          rec.expect.tokens = rec_tokens;
          rec.pages.assign(PagesFor(PayloadBytesFor(RecordKind::kKeyValue, rec_tokens, opts_.row_bytes)),
                           false);
          recs.push_back(std::move(rec));
        }
        Rec& rec = recs[it->second];
        auto mark = [&](uint64_t from) {
          for (uint64_t pg = from / kBlockSize; pg <= (from + rb - 1) / kBlockSize; ++pg) {
            rec.pages[pg] = true;
          }
        };
        if (r.k) mark(rec_row * rb);
        if (r.v) mark((uint64_t{rec.expect.tokens} + rec_row) * rb);
        rec.demand = rec.demand || !r.prefetch;
        targets[i].push_back(Target{it->second, rec_row});
      }
      if (!r.status.ok()) targets[i].clear();
    }
  }

  // The header block and the needed pages of each record, runs of adjacent
  // blocks merged into one read.
  std::vector<ReadOp> ops;
  std::vector<size_t> op_rec;
  uint64_t pages = 0;
  for (size_t ri = 0; ri < recs.size(); ++ri) {
    Rec& rec = recs[ri];
    const size_t blocks = 1 + rec.pages.size();
    rec.buf = AllocateAligned(blocks * kBlockSize);
    size_t b = 0;
    while (b < blocks) {
      auto needed = [&](size_t blk) { return blk == 0 || rec.pages[blk - 1]; };
      if (!needed(b)) {
        ++b;
        continue;
      }
      size_t e = b;
      while (e < blocks && needed(e)) ++e;
      ReadOp op;
      op.file = rec.file.get();
      op.offset = (uint64_t{rec.where.block} + b) * kBlockSize;
      op.length = (e - b) * kBlockSize;
      op.buf = rec.buf.get() + b * kBlockSize;
      op.prefetch = !rec.demand;
      ops.push_back(op);
      op_rec.push_back(ri);
      pages += e - b - (b == 0 ? 1 : 0);
      b = e;
    }
  }
  RETURN_IF_ERROR(ReadOnSide(ops));
  uint64_t bytes = 0;
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    Rec& rec = recs[op_rec[oi]];
    bytes += ops[oi].done;
    if (!rec.status.ok()) continue;
    rec.status = ops[oi].status;
    if (rec.status.ok() && ops[oi].done < ops[oi].length) {
      rec.status = Status::Corruption("record cut short at end of segment");
    }
  }
  uint64_t corrupt = 0, errors = 0, reordered = 0;
  for (Rec& rec : recs) {
    if (rec.run) ++reordered;
    if (rec.status.ok()) {
      auto h = CheckHeader(rec.buf.get(), rec.expect);
      rec.status = h.status();
      for (uint32_t pg = 0; rec.status.ok() && pg < rec.pages.size(); ++pg) {
        if (rec.pages[pg] &&
            !PageChecksumOk(*h, pg, {rec.buf.get() + kBlockSize * (1 + size_t{pg}), kBlockSize})) {
          rec.status = Status::Corruption("payload page " + std::to_string(pg) + " checksum mismatch");
        }
      }
    }
    if (rec.status.ok()) continue;
    rec.status = rec.status.WithContext(std::string(rec.run ? "reordered record" : "record") +
                                        " layer " + std::to_string(rec.expect.layer) + " at " +
                                        SegmentPath(rec.where.segment) + " block " +
                                        std::to_string(rec.where.block));
    rec.status.IsCorruption() ? ++corrupt : ++errors;
    std::lock_guard<std::mutex> l(mu_);
    if (rec.run) {
      // Only a copy: drop the layout; the reads below fall back to the originals.
      TIERKV_LOG(kWarn) << "store: " << rec.status.ToString() << "; the reordered layout is dropped";
      auto it = run_of_.find(rec.run->chunks[0]);
      if (it != run_of_.end() && it->second == rec.run) DropRunLocked(rec.run->chunks[0]);
    } else if (rec.status.IsCorruption()) {
      TIERKV_LOG(kWarn) << "store: chunk " << rec.chunk << ": " << rec.status.ToString()
                        << "; the chunk and its descendants leave the index";
      if (tree_.IsLive(rec.chunk) && tree_.chunk(rec.chunk).prefix_hash == rec.expect.prefix_hash) {
        DropLocked(rec.chunk, /*corrupt=*/true);
      }
    }
  }
  std::vector<size_t> retry;
  for (size_t i = 0; i < reads.size(); ++i) {
    RowRead& r = reads[i];
    if (!r.status.ok()) continue;
    bool from_bad_run = false;
    for (const Target& t : targets[i]) {
      const Rec& rec = recs[t.rec];
      if (!rec.status.ok()) {
        from_bad_run = from_bad_run || rec.run != nullptr;
        if (!rec.run) r.status = rec.status;
      }
    }
    if (!r.status.ok()) continue;
    if (from_bad_run) {
      retry.push_back(i);
      continue;
    }
    for (size_t j = 0; j < targets[i].size(); ++j) {
      const Target& t = targets[i][j];
      const Rec& rec = recs[t.rec];
      const char* payload = rec.buf.get() + kBlockSize;
      if (r.k) std::memcpy(r.k + j * rb, payload + t.row * rb, rb);
      if (r.v) std::memcpy(r.v + j * rb, payload + (uint64_t{rec.expect.tokens} + t.row) * rb, rb);
    }
  }
  RowReadStats st;
  st.records = recs.size();
  st.reordered_records = reordered;
  st.pages = pages;
  st.bytes = bytes;
  st.ios = ops.size();
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.row_reads += reads.size();
    stats_.records_read += recs.size();
    stats_.reordered_records_read += reordered;
    stats_.pages_read += pages;
    stats_.bytes_read += bytes;
    stats_.corrupt_records += corrupt;
    stats_.read_errors += errors;
  }
  if (!retry.empty()) {
    // The layout is gone now, so these read the chunks' own records.
    std::vector<RowRead> again;
    for (size_t i : retry) again.push_back(reads[i]);
    RowReadStats more;
    RETURN_IF_ERROR(ReadRows(again, &more));
    for (size_t n = 0; n < retry.size(); ++n) reads[retry[n]].status = again[n].status;
    st.records += more.records;
    st.reordered_records += more.reordered_records;
    st.pages += more.pages;
    st.bytes += more.bytes;
    st.ios += more.ios;
  }
  if (out_stats) *out_stats = st;
  return Status::Ok();
}

Status ChunkStore::ReadProbeKeys(std::span<ProbeRead> reads, RowReadStats* out_stats) {
  if (opts_.probe_bytes == 0) {
    return Status::InvalidArgument("store probe read: the store was opened without probe_bytes");
  }
  const uint64_t pb = opts_.probe_bytes;
  struct Probe {
    size_t read;
    Location where;
    uint64_t len;
    Expect expect;
    std::shared_ptr<RandomAccessFile> file;
    char* buf = nullptr;
    Status status;
  };
  std::vector<Probe> probes;
  std::vector<size_t> fallback;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < reads.size(); ++i) {
      ProbeRead& r = reads[i];
      r.status = Status::Ok();
      r.from_probe_record = false;
      if (r.layer >= opts_.layers || r.out == nullptr) {
        r.status = Status::InvalidArgument("store probe read: layer " + std::to_string(r.layer) +
                                           " of " + std::to_string(opts_.layers) +
                                           (r.out ? "" : ", no output buffer"));
        continue;
      }
      if (!tree_.IsLive(r.chunk) || tree_.chunk(r.chunk).prefix_hash != r.prefix_hash) {
        r.status = Status::NotFound("store probe read: chunk " + std::to_string(r.chunk) + " not stored");
        continue;
      }
      const Location at = ProbeLocationOf(r.chunk, r.layer);
      if (at.segment == 0) {
        fallback.push_back(i);
        continue;
      }
      auto file = ReaderFor(at.segment);
      if (!file.ok()) {
        r.status = file.status();
        continue;
      }
      const index::ChunkInfo& c = tree_.chunk(r.chunk);
      Probe p{i, at, probe_record_bytes(c.tokens), Expect{}, *file};
      p.expect.kind = RecordKind::kProbeKeys;
      p.expect.layer = r.layer;
      p.expect.prefix_hash = c.prefix_hash;
      p.expect.first_token = c.first_token;
      p.expect.tokens = c.tokens;
      p.expect.row_bytes = opts_.probe_bytes;
      TouchLocked(r.chunk);
      probes.push_back(std::move(p));
    }
  }
  // Records that sit back to back (one layer of consecutive chunks of one
  // Put) are fetched with one read.
  std::sort(probes.begin(), probes.end(), [](const Probe& a, const Probe& b) {
    return std::tie(a.where.segment, a.where.block) < std::tie(b.where.segment, b.where.block);
  });
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadOp> ops;
  std::vector<std::pair<size_t, size_t>> op_probes;  // [first, last) of probes per op
  for (size_t i = 0; i < probes.size();) {
    size_t j = i + 1;
    uint64_t len = probes[i].len;
    while (j < probes.size() && probes[j].where.segment == probes[i].where.segment &&
           uint64_t{probes[j].where.block} * kBlockSize ==
               uint64_t{probes[i].where.block} * kBlockSize + len) {
      len += probes[j].len;
      ++j;
    }
    bufs.push_back(AllocateAligned(len));
    uint64_t off = 0;
    bool demand = false;
    for (size_t k = i; k < j; ++k) {
      probes[k].buf = bufs.back().get() + off;
      off += probes[k].len;
      demand = demand || !reads[probes[k].read].prefetch;
    }
    ReadOp op;
    op.file = probes[i].file.get();
    op.offset = uint64_t{probes[i].where.block} * kBlockSize;
    op.length = len;
    op.buf = bufs.back().get();
    op.prefetch = !demand;
    ops.push_back(op);
    op_probes.emplace_back(i, j);
    i = j;
  }
  RETURN_IF_ERROR(ReadOnSide(ops));
  RowReadStats st;
  st.ios = ops.size();
  uint64_t corrupt = 0, errors = 0;
  for (size_t o = 0; o < ops.size(); ++o) {
    st.bytes += ops[o].done;
    for (size_t k = op_probes[o].first; k < op_probes[o].second; ++k) {
      Probe& p = probes[k];
      ProbeRead& r = reads[p.read];
      p.status = ops[o].status;
      const uint64_t end = static_cast<uint64_t>(p.buf - ops[o].buf) + p.len;
      if (p.status.ok() && ops[o].done < end) p.status = Status::Corruption("probe record cut short");
      if (p.status.ok()) p.status = VerifyRecord(p.buf, p.expect);
      ++st.records;
      st.pages += p.len / kBlockSize - 1;
      if (p.status.ok()) {
        std::memcpy(r.out, p.buf + kBlockSize, size_t{p.expect.tokens} * pb);
        r.from_probe_record = true;
        continue;
      }
      p.status.IsCorruption() ? ++corrupt : ++errors;
      TIERKV_LOG(kWarn) << "store: probe record of chunk " << r.chunk << " layer " << r.layer
                        << " at " << SegmentPath(p.where.segment) << " block " << p.where.block
                        << ": " << p.status.ToString() << "; reading its K record instead";
      if (p.status.IsCorruption()) {
        // Only a copy: drop it for every layer, keep the chunk.
        std::lock_guard<std::mutex> l(mu_);
        if (tree_.IsLive(r.chunk) && tree_.chunk(r.chunk).prefix_hash == r.prefix_hash &&
            probe_block_[r.chunk] != kNoProbe) {
          const uint64_t bytes = opts_.layers * probe_record_bytes(tree_.chunk(r.chunk).tokens);
          probe_block_[r.chunk] = kNoProbe;
          live_bytes_ -= bytes;
          dead_bytes_ += bytes;
          dirty_ = true;
        }
      }
      fallback.push_back(p.read);
    }
  }
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.probe_reads += reads.size();
    stats_.probe_fallbacks += fallback.size();
    stats_.records_read += st.records;
    stats_.bytes_read += st.bytes;
    stats_.pages_read += st.pages;
    stats_.corrupt_records += corrupt;
    stats_.read_errors += errors;
  }
  if (!fallback.empty()) {
    // The probe heads' keys are the first probe_bytes of each K row.
    std::vector<ChunkRead> kreads;
    std::vector<std::vector<char>> kbufs;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t i : fallback) {
        const ProbeRead& r = reads[i];
        const uint32_t n = tree_.IsLive(r.chunk) ? tree_.chunk(r.chunk).tokens : 0;
        kbufs.emplace_back(size_t{n} * opts_.row_bytes);
        kreads.push_back(ChunkRead{r.chunk, r.prefix_hash, r.layer, kbufs.back().data(), nullptr});
      }
    }
    RowReadStats more;
    RETURN_IF_ERROR(Read(kreads, &more));
    st.records += more.records;
    st.pages += more.pages;
    st.bytes += more.bytes;
    st.ios += more.ios;
    for (size_t n = 0; n < fallback.size(); ++n) {
      ProbeRead& r = reads[fallback[n]];
      r.status = kreads[n].status;
      if (!r.status.ok()) continue;
      const size_t tokens = kbufs[n].size() / opts_.row_bytes;
      for (size_t t = 0; t < tokens; ++t) {
        std::memcpy(r.out + t * pb, kbufs[n].data() + t * opts_.row_bytes, pb);
      }
    }
  }
  if (out_stats) *out_stats = st;
  return Status::Ok();
}

void ChunkStore::ReportImportance(const LookupResult& prefix, uint16_t layer,
                                  std::span<const float> importance) {
  if (layer >= opts_.layers) return;
  const uint32_t C = opts_.chunk_tokens;
  std::lock_guard<std::mutex> l(mu_);
  size_t pos = 0;
  for (size_t i = 0; i < prefix.chunks.size() && pos < importance.size(); ++i) {
    const uint32_t id = prefix.chunks[i];
    const size_t n = prefix.chunk_tokens[i];
    const size_t used = std::min(n, importance.size() - pos);
    if (tree_.IsLive(id) && tree_.chunk(id).prefix_hash == prefix.prefix_hashes[i]) {
      Heat& h = heat_[id];
      if (h.prefix_hash != prefix.prefix_hashes[i] || h.sum.empty()) {
        h = Heat{};
        h.prefix_hash = prefix.prefix_hashes[i];
        h.sum.assign(size_t{opts_.layers} * C, 0.0f);
        h.reports.assign(opts_.layers, 0);
      }
      for (size_t r = 0; r < used; ++r) h.sum[size_t{layer} * C + r] += importance[pos + r];
      ++h.reports[layer];
      h.last = ++heat_clock_;
      h.fresh = true;
    }
    pos += n;
  }
  const size_t limit = std::max<uint32_t>(1, opts_.reorder_tracked_chunks);
  if (heat_.size() > limit + limit / 8) {
    // Forget the least recently reported, down to the limit (amortised).
    std::vector<std::pair<uint64_t, uint32_t>> by_age;
    for (const auto& [id, h] : heat_) by_age.emplace_back(h.last, id);
    std::nth_element(by_age.begin(), by_age.begin() + (heat_.size() - limit), by_age.end());
    for (size_t k = 0; k < heat_.size() - limit; ++k) heat_.erase(by_age[k].second);
  }
}

void ChunkStore::DropRunLocked(uint32_t chunk) {
  auto it = run_of_.find(chunk);
  if (it == run_of_.end()) return;
  const std::shared_ptr<const Run> run = it->second;
  for (uint32_t c : run->chunks) {
    auto jt = run_of_.find(c);
    if (jt != run_of_.end() && jt->second == run) {
      run_of_.erase(jt);
      --run_chunks_;
    }
  }
  live_bytes_ -= run->bytes;
  dead_bytes_ += run->bytes;
  run_bytes_ -= run->bytes;
  std::lock_guard<std::mutex> s(stats_mu_);
  ++stats_.reordered_runs_dropped;
}

void ChunkStore::ForgetChunkLocked(uint32_t chunk, uint64_t prefix_hash) {
  DropRunLocked(chunk);
  heat_.erase(chunk);
  if (opts_.on_chunk_removed) opts_.on_chunk_removed(prefix_hash);
}

Result<ReorderResult> ChunkStore::Reorder(const ReorderOptions& ro) {
  if (opts_.read_only) return Status::InvalidArgument("store reorder: opened read-only");
  const uint32_t C = opts_.chunk_tokens;
  const uint32_t max_chunks =
      std::max<uint32_t>(1, std::min<uint32_t>(ro.max_run_chunks, index::MappingList::kMaxRows / C));
  std::lock_guard<std::mutex> w(write_mu_);
  struct Plan {
    std::shared_ptr<Run> run;
    std::vector<uint16_t> tokens;                 // per chunk
    std::vector<std::vector<Location>> sources;   // per chunk, per layer
    std::vector<std::shared_ptr<RandomAccessFile>> files;  // per chunk, per layer
    double heat = 0;
  };
  std::vector<Plan> plans;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::set<uint32_t> seen;  // runs by first chunk
    for (auto& [id, h] : heat_) {
      if (!h.fresh || !tree_.IsLive(id) || tree_.chunk(id).prefix_hash != h.prefix_hash) continue;
      const std::span<const uint32_t> node = tree_.NodeChunksOf(id);
      const size_t start = tree_.chunk(id).index_in_node / max_chunks * max_chunks;
      const size_t end = std::min(node.size(), start + max_chunks);
      if (!seen.insert(node[start]).second) continue;
      Plan p;
      p.run = std::make_shared<Run>();
      Run& run = *p.run;
      run.chunk_tokens = C;
      run.first_token = tree_.chunk(node[start]).first_token;
      for (size_t k = start; k < end; ++k) {
        const index::ChunkInfo& c = tree_.chunk(node[k]);
        run.chunks.push_back(node[k]);
        run.hashes.push_back(c.prefix_hash);
        p.tokens.push_back(c.tokens);
        run.rows += c.tokens;
      }
      run.end_hash = run.hashes.back();
      const uint32_t parent = tree_.ParentChunk(node[start]);
      run.parent_hash = parent == index::kNoChunk ? 0 : tree_.chunk(parent).prefix_hash;
      // Average importance per row and layer; rows never reported score 0.
      std::vector<std::vector<uint32_t>> orders(opts_.layers);
      for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
        std::vector<float> score(run.rows, 0.0f);
        uint32_t row = 0;
        for (size_t k = 0; k < run.chunks.size(); ++k) {
          auto ht = heat_.find(run.chunks[k]);
          const bool ok = ht != heat_.end() && ht->second.prefix_hash == run.hashes[k] &&
                          ht->second.reports[layer] > 0;
          for (uint32_t r = 0; r < p.tokens[k]; ++r, ++row) {
            if (ok) {
              score[row] = ht->second.sum[size_t{layer} * C + r] / ht->second.reports[layer];
            }
          }
          if (ok && layer == 0) p.heat += ht->second.reports[0];
        }
        orders[layer] = index::MappingList::OrderByScore(score);
      }
      auto map = index::MappingList::FromOrders(orders);
      if (!map.ok()) return map.status().WithContext("store reorder");
      run.map = std::move(map).value();
      bool identity = true;
      for (uint16_t layer = 0; layer < opts_.layers && identity; ++layer) {
        identity = run.map.IsIdentity(layer);
      }
      auto old = run_of_.find(node[start]);
      const bool same_as_old = old != run_of_.end() && old->second->chunks == run.chunks &&
                               old->second->map == run.map;
      if (same_as_old || (identity && old == run_of_.end())) {
        for (uint32_t c : run.chunks) {
          auto ht = heat_.find(c);
          if (ht != heat_.end()) ht->second.fresh = false;
        }
        continue;  // nothing to gain
      }
      run.records = (run.rows + C - 1) / C;
      for (uint32_t i = 0; i < run.records; ++i) {
        run.bytes += opts_.layers * record_bytes(run.RecordTokens(i));
      }
      if (opts_.disk_budget_bytes != 0 && live_bytes_ + run.bytes > opts_.disk_budget_bytes) {
        continue;  // a layout never evicts chunks to make room for itself
      }
      for (uint32_t c : run.chunks) {
        p.sources.push_back(LocationsOf(c));
        for (const Location& at : p.sources.back()) {
          auto file = ReaderFor(at.segment);
          if (!file.ok()) return file.status().WithContext("store reorder");
          p.files.push_back(*file);
        }
      }
      plans.push_back(std::move(p));
    }
    std::sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) { return a.heat > b.heat; });
    if (plans.size() > ro.max_runs) plans.resize(ro.max_runs);
  }

  ReorderResult out;
  const uint64_t rb = opts_.row_bytes;
  for (Plan& p : plans) {
    Run& run = *p.run;
    // The chunks' own records, verified.
    std::vector<AlignedBuffer> bufs;
    std::vector<ReadOp> ops;
    for (size_t k = 0; k < run.chunks.size(); ++k) {
      for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
        const uint64_t len = record_bytes(p.tokens[k]);
        bufs.push_back(AllocateAligned(len));
        ReadOp op;
        op.file = p.files[k * opts_.layers + layer].get();
        op.offset = uint64_t{p.sources[k][layer].block} * kBlockSize;
        op.length = len;
        op.buf = bufs.back().get();
        op.prefetch = true;  // background work: demand reads of requests go first
        ops.push_back(op);
      }
    }
    {
      std::lock_guard<std::mutex> io(io_mu_);
      RETURN_IF_ERROR(io_->Read(ops).WithContext("store reorder"));
    }
    Status bad;
    uint32_t first = run.first_token;
    for (size_t k = 0; k < run.chunks.size() && bad.ok(); ++k) {
      for (uint16_t layer = 0; layer < opts_.layers && bad.ok(); ++layer) {
        const ReadOp& op = ops[k * opts_.layers + layer];
        bad = op.status;
        if (bad.ok() && op.done < op.length) bad = Status::Corruption("record cut short");
        if (bad.ok()) bad = VerifyRecord(op.buf, layer, run.hashes[k], first, p.tokens[k]);
      }
      first += p.tokens[k];
    }
    if (!bad.ok()) {
      // Left for the reads to find and handle; this run is simply not reordered.
      TIERKV_LOG(kWarn) << "store reorder: skipping a run: " << bad.ToString();
      continue;
    }
    // Row r of the run lives in chunk k's record at row r - offset[k].
    std::vector<uint32_t> chunk_of(run.rows), row_in(run.rows);
    for (uint32_t k = 0, r = 0; k < run.chunks.size(); ++k) {
      for (uint32_t i = 0; i < p.tokens[k]; ++i, ++r) {
        chunk_of[r] = k;
        row_in[r] = i;
      }
    }
    std::string payload, record, all;
    for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
      const std::vector<uint32_t> rows = run.map.RowsOf(layer);
      for (uint32_t i = 0; i < run.records; ++i) {
        const uint32_t n = run.RecordTokens(i);
        payload.assign(2 * n * rb, '\0');
        RecordHeader h;
        h.fingerprint = opts_.fingerprint;
        h.kind = RecordKind::kReorderedKeyValue;
        h.dtype = opts_.dtype;
        h.layer = layer;
        h.first_token = run.first_token;
        h.token_count = n;
        h.row_bytes = opts_.row_bytes;
        h.prefix_hash = run.end_hash;
        h.parent_hash = run.parent_hash;
        for (uint32_t j = 0; j < n; ++j) {
          const uint32_t row = rows[i * C + j];
          const uint32_t k = chunk_of[row];
          const char* src = bufs[k * opts_.layers + layer].get() + kBlockSize;
          std::memcpy(payload.data() + j * rb, src + row_in[row] * rb, rb);
          std::memcpy(payload.data() + (n + j) * rb, src + (uint64_t{p.tokens[k]} + row_in[row]) * rb, rb);
          h.tokens.push_back(static_cast<int32_t>(run.first_token + row));
        }
        {
          std::lock_guard<std::mutex> l(mu_);
          h.sequence = ++sequence_;
        }
        EncodeRecord(h, payload, &record);
        all += record;
      }
    }
    // The run's records go back to back in one segment.
    Status s;
    if (!active_ || active_->Size() + all.size() > opts_.segment_bytes) s = OpenSegmentForAppend();
    const uint32_t base = s.ok() ? static_cast<uint32_t>(active_->Size() / kBlockSize) : 0;
    if (s.ok()) s = active_->Append(all);
    if (s.ok()) s = active_->Sync();
    if (!s.ok()) {
      if (active_) active_->Close().IgnoreError();
      active_.reset();
      std::lock_guard<std::mutex> l(mu_);
      dead_bytes_ += all.size();
      return s.WithContext("store reorder");
    }
    uint32_t block = base;
    for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
      for (uint32_t i = 0; i < run.records; ++i) {
        run.where.push_back(Location{active_segment_, block});
        block += static_cast<uint32_t>(record_bytes(run.RecordTokens(i)) / kBlockSize);
      }
    }
    out.bytes_written += all.size();
    // Swap in, if every chunk of the run is still what was read.
    std::lock_guard<std::mutex> l(mu_);
    bool still = true;
    for (size_t k = 0; k < run.chunks.size() && still; ++k) {
      still = tree_.IsLive(run.chunks[k]) && tree_.chunk(run.chunks[k]).prefix_hash == run.hashes[k];
    }
    const bool fits = opts_.disk_budget_bytes == 0 || live_bytes_ + run.bytes <= opts_.disk_budget_bytes;
    if (!still || !fits) {
      dead_bytes_ += all.size();
      ++out.discarded;
      continue;
    }
    for (uint32_t c : run.chunks) DropRunLocked(c);
    std::shared_ptr<const Run> installed = p.run;
    for (uint32_t c : run.chunks) {
      run_of_[c] = installed;
      ++run_chunks_;
      auto ht = heat_.find(c);
      if (ht != heat_.end()) ht->second.fresh = false;
    }
    live_bytes_ += run.bytes;
    run_bytes_ += run.bytes;
    ++out.runs;
  }
  std::lock_guard<std::mutex> st(stats_mu_);
  stats_.reorders += out.runs;
  stats_.bytes_written += out.bytes_written;
  return out;
}

Result<std::vector<uint32_t>> ChunkStore::ListSegments() const {
  ASSIGN_OR_RETURN(auto names, fs_->ListDir(opts_.dir));
  std::vector<uint32_t> out;
  for (const auto& n : names) {
    if (uint32_t seg = SegmentNumber(n)) out.push_back(seg);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status ChunkStore::SealLocked() {
  if (!active_) return Status::Ok();
  Status s = active_->Close();
  active_.reset();  // the next Put opens a new segment
  return s;
}

Status ChunkStore::WriteManifest() {
  Manifest m;
  m.fingerprint = opts_.fingerprint;
  m.chunk_tokens = opts_.chunk_tokens;
  m.layers = opts_.layers;
  {
    std::lock_guard<std::mutex> l(mu_);
    m.log_from = active_segment_ + 1;
    m.sequence = sequence_;
    std::set<uint32_t> used;
    for (uint32_t id : tree_.LiveChunks()) {
      const index::ChunkInfo& c = tree_.chunk(id);
      ManifestChunk mc;
      mc.prefix_hash = c.prefix_hash;
      const uint32_t parent = tree_.ParentChunk(id);
      mc.parent_hash = parent == index::kNoChunk ? 0 : tree_.chunk(parent).prefix_hash;
      mc.first_token = c.first_token;
      auto t = tree_.ChunkTokens(id);
      mc.tokens.assign(t.begin(), t.end());
      for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
        const Location w = LocationOf(id, layer);
        mc.where.emplace_back(w.segment, w.block);
        used.insert(w.segment);
      }
      if (id < probe_block_.size()) {
        mc.probe_block = probe_block_[id];
        mc.probe_stride = probe_stride_[id];
      }
      m.chunks.push_back(std::move(mc));
    }
    m.segments.assign(used.begin(), used.end());
    dirty_ = false;
  }
  Status s = WriteFileAtomically(fs_, opts_.dir + "/" + kManifestFile, EncodeManifest(m));
  if (!s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    dirty_ = true;
  }
  return s.WithContext("store manifest");
}

Status ChunkStore::Checkpoint() {
  if (opts_.read_only) return Status::InvalidArgument("store checkpoint: opened read-only");
  std::lock_guard<std::mutex> w(write_mu_);
  RETURN_IF_ERROR(SealLocked().WithContext("store checkpoint"));
  return WriteManifest();
}

Result<CompactResult> ChunkStore::Compact(double min_dead_fraction) {
  if (opts_.read_only) return Status::InvalidArgument("store compact: opened read-only");
  if (!(min_dead_fraction > 0 && min_dead_fraction <= 1)) {
    return Status::InvalidArgument("store compact: min_dead_fraction must be in (0, 1]");
  }
  std::lock_guard<std::mutex> w(write_mu_);
  RETURN_IF_ERROR(SealLocked().WithContext("store compact"));
  CompactResult out;
  ASSIGN_OR_RETURN(std::vector<uint32_t> segments, ListSegments());
  // Sizes first: no file-system calls under the index lock. All segments are
  // sealed and Put waits on write_mu_, so they cannot grow meanwhile.
  std::vector<uint64_t> sizes;
  for (uint32_t seg : segments) {
    ASSIGN_OR_RETURN(uint64_t size, fs_->FileSize(SegmentPath(seg)));
    sizes.push_back(size);
  }

  // What lives where, and which segments are worth rewriting.
  struct Move {
    uint32_t chunk;
    uint16_t layer;
    uint64_t prefix_hash;
    uint32_t first_token, tokens;
    Location from, to;
    AlignedBuffer buf;
    std::shared_ptr<RandomAccessFile> file;
    Status status;
    std::shared_ptr<const Run> run;  // a reordered run's record where[run_index]
    uint32_t run_index = 0;
    bool probe = false;              // the chunk's probe record of `layer`
  };
  std::vector<Move> moves;
  std::set<uint32_t> victims;
  uint64_t victim_bytes = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::unordered_map<uint32_t, uint64_t> live;
    for (uint32_t id : tree_.LiveChunks()) {
      for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
        live[LocationOf(id, layer).segment] +=
            record_bytes(tree_.chunk(id).tokens);
      }
      const Location probe = ProbeLocationOf(id, 0);
      if (probe.segment != 0) {
        live[probe.segment] += opts_.layers * probe_record_bytes(tree_.chunk(id).tokens);
      }
    }
    // Each reordered run once (run_of_ lists it under every one of its chunks).
    std::vector<std::shared_ptr<const Run>> runs;
    {
      std::set<const Run*> seen;
      for (const auto& [c, run] : run_of_) {
        if (seen.insert(run.get()).second) runs.push_back(run);
      }
    }
    for (const auto& run : runs) {
      for (uint32_t i = 0; i < run->where.size(); ++i) {
        live[run->where[i].segment] += record_bytes(run->RecordTokens(i % run->records));
      }
    }
    for (size_t i = 0; i < segments.size(); ++i) {
      const uint32_t seg = segments[i];
      const uint64_t size = sizes[i];
      const uint64_t l_bytes = live.count(seg) ? live[seg] : 0;
      if (size == 0 || static_cast<double>(size - std::min(size, l_bytes)) >=
                           min_dead_fraction * static_cast<double>(size)) {
        victims.insert(seg);
        victim_bytes += size;
      }
    }
    if (victims.empty()) return out;
    for (uint32_t id : tree_.LiveChunks()) {
      const index::ChunkInfo& c = tree_.chunk(id);
      for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
        const Location at = LocationOf(id, layer);
        if (!victims.count(at.segment)) continue;
        auto file = ReaderFor(at.segment);
        if (!file.ok()) return file.status().WithContext("store compact");
        moves.push_back(Move{id, layer, c.prefix_hash, c.first_token, c.tokens, at, Location{},
                             AllocateAligned(record_bytes(c.tokens)), *file, Status::Ok()});
      }
      // The probe records follow the chunk's K/V into the same segment.
      const Location probe = ProbeLocationOf(id, 0);
      if (probe.segment != 0 && victims.count(probe.segment)) {
        auto file = ReaderFor(probe.segment);
        if (!file.ok()) return file.status().WithContext("store compact");
        for (uint16_t layer = 0; layer < opts_.layers; ++layer) {
          Move m{id, layer, c.prefix_hash, c.first_token, c.tokens, ProbeLocationOf(id, layer),
                 Location{}, AllocateAligned(probe_record_bytes(c.tokens)), *file, Status::Ok()};
          m.probe = true;
          moves.push_back(std::move(m));
        }
      }
    }
    for (const auto& run : runs) {
      for (uint32_t i = 0; i < run->where.size(); ++i) {
        const Location at = run->where[i];
        if (!victims.count(at.segment)) continue;
        auto file = ReaderFor(at.segment);
        if (!file.ok()) return file.status().WithContext("store compact");
        const uint32_t n = run->RecordTokens(i % run->records);
        Move m{run->chunks[0], static_cast<uint16_t>(i / run->records), run->end_hash,
               run->first_token, n, at, Location{}, AllocateAligned(record_bytes(n)), *file,
               Status::Ok()};
        m.run = run;
        m.run_index = i;
        moves.push_back(std::move(m));
      }
    }
  }

  // Read and verify the live records (no index lock held), append them.
  std::vector<ReadOp> ops;
  for (Move& m : moves) {
    ReadOp op;
    op.file = m.file.get();
    op.offset = uint64_t{m.from.block} * kBlockSize;
    op.length = m.probe ? probe_record_bytes(m.tokens) : record_bytes(m.tokens);
    op.buf = m.buf.get();
    ops.push_back(op);
  }
  {
    std::lock_guard<std::mutex> io(io_mu_);
    RETURN_IF_ERROR(io_->Read(ops).WithContext("store compact"));
  }
  uint64_t appended = 0;
  Status s;
  for (size_t i = 0; i < moves.size() && s.ok(); ++i) {
    Move& m = moves[i];
    m.status = ops[i].status;
    if (m.status.ok() && ops[i].done < ops[i].length) {
      m.status = Status::Corruption("record cut short at end of segment");
    }
    if (m.status.ok()) {
      Expect e;
      e.layer = m.layer;
      e.prefix_hash = m.prefix_hash;
      e.first_token = m.first_token;
      e.tokens = m.tokens;
      if (m.run) {
        e.kind = RecordKind::kReorderedKeyValue;
        e.run = m.run.get();
        e.run_record = m.run_index % m.run->records;
      } else if (m.probe) {
        e.kind = RecordKind::kProbeKeys;
        e.row_bytes = opts_.probe_bytes;
      }
      m.status = VerifyRecord(m.buf.get(), e);
    }
    if (!m.status.ok()) continue;
    const uint64_t len = ops[i].length;
    // A chunk's K/V and probe records, or a run's records, are one unit: a
    // new segment only between units.
    const bool unit_start = i == 0 || moves[i - 1].chunk != m.chunk || moves[i - 1].run != m.run;
    const uint64_t unit = m.run ? opts_.layers * len
                                : opts_.layers * (record_bytes(m.tokens) + probe_record_bytes(m.tokens));
    if (!active_ || (unit_start && !m.probe && active_->Size() + unit > opts_.segment_bytes)) {
      s = OpenSegmentForAppend();
      if (!s.ok()) break;
    }
    m.to = Location{active_segment_, static_cast<uint32_t>(active_->Size() / kBlockSize)};
    s = active_->Append(std::string_view(m.buf.get(), len));
    appended += len;
  }
  if (s.ok() && active_) s = active_->Sync();
  if (!s.ok()) {
    // Nothing switched; the partial copies are dead bytes for a later compaction.
    if (active_) active_->Close().IgnoreError();
    active_.reset();
    std::lock_guard<std::mutex> l(mu_);
    dead_bytes_ += appended;
    return s.WithContext("store compact");
  }

  // Switch the index to the copies, then make that durable, then delete.
  {
    std::lock_guard<std::mutex> l(mu_);
    // Reordered runs: a new Run with the moved locations replaces the old one
    // (reads in flight keep the old one, whose segments stay open for them).
    std::map<const Run*, std::shared_ptr<Run>> moved_runs;
    for (Move& m : moves) {
      if (!m.run) continue;
      auto it = run_of_.find(m.run->chunks[0]);
      if (it == run_of_.end() || it->second != m.run) continue;  // dropped meanwhile
      if (!m.status.ok()) {
        TIERKV_LOG(kWarn) << "store compact: reordered record: " << m.status.ToString()
                          << "; the reordered layout is dropped";
        DropRunLocked(m.run->chunks[0]);
        moved_runs.erase(m.run.get());
        continue;
      }
      auto& copy = moved_runs[m.run.get()];
      if (!copy) copy = std::make_shared<Run>(*m.run);
      copy->where[m.run_index] = m.to;
      ++out.records_moved;
    }
    for (auto& [old_run, copy] : moved_runs) {
      auto it = run_of_.find(copy->chunks[0]);
      if (it == run_of_.end() || it->second.get() != old_run) continue;
      std::shared_ptr<const Run> installed = copy;
      for (uint32_t c : copy->chunks) run_of_[c] = installed;
    }
    for (Move& m : moves) {
      if (m.run || m.probe) continue;
      const bool same = tree_.IsLive(m.chunk) && tree_.chunk(m.chunk).prefix_hash == m.prefix_hash;
      if (!m.status.ok()) {
        TIERKV_LOG(kWarn) << "store compact: chunk " << m.chunk << " layer " << m.layer << ": "
                          << m.status.ToString() << "; the chunk and its descendants leave the index";
        if (same) DropLocked(m.chunk, m.status.IsCorruption());
        continue;
      }
      if (!same) continue;
      std::vector<Location> where = LocationsOf(m.chunk);
      Location& at = where[m.layer];
      if (at.segment == m.from.segment && at.block == m.from.block) {
        at = m.to;
        SetLocations(m.chunk, where);
        ++out.records_moved;
      }
    }
    // Probe records, per chunk: all layers' copies, in the segment its K/V now
    // lives in, or none (the probe keys are then sliced from K).
    for (size_t i = 0; i < moves.size(); ++i) {
      if (!moves[i].probe || moves[i].layer != 0) continue;
      const Move& m0 = moves[i];
      if (!tree_.IsLive(m0.chunk) || tree_.chunk(m0.chunk).prefix_hash != m0.prefix_hash) continue;
      if (ProbeLocationOf(m0.chunk, 0).block != m0.from.block) continue;
      bool ok = i + opts_.layers <= moves.size();
      for (uint16_t l = 0; l < opts_.layers && ok; ++l) {
        const Move& m = moves[i + l];
        ok = m.probe && m.chunk == m0.chunk && m.status.ok() && m.to.segment != 0 &&
             m.to.segment == LocationOf(m0.chunk, 0).segment;
      }
      if (ok) {
        probe_block_[m0.chunk] = m0.to.block;
        probe_stride_[m0.chunk] = static_cast<uint16_t>(probe_record_bytes(m0.tokens) / kBlockSize);
        out.records_moved += opts_.layers;
      } else {
        // Not a wrong KV, only a lost copy: the K records still hold these keys.
        const uint64_t bytes = opts_.layers * probe_record_bytes(m0.tokens);
        probe_block_[m0.chunk] = kNoProbe;
        live_bytes_ -= bytes;
        dead_bytes_ += bytes;
      }
    }
    dirty_ = true;
  }
  RETURN_IF_ERROR(SealLocked().WithContext("store compact"));
  RETURN_IF_ERROR(WriteManifest());
  {
    std::lock_guard<std::mutex> l(mu_);
    for (uint32_t seg : victims) {
      if (seg < readers_.size()) readers_[seg].reset();  // reads in flight keep their own reference
    }
  }
  for (uint32_t seg : victims) RETURN_IF_ERROR(fs_->DeleteFile(SegmentPath(seg)));
  RETURN_IF_ERROR(fs_->SyncDir(opts_.dir));
  out.segments = static_cast<uint32_t>(victims.size());
  {
    std::lock_guard<std::mutex> l(mu_);
    segment_count_ -= std::min<size_t>(segment_count_, victims.size());
    dead_bytes_ = dead_bytes_ + appended > victim_bytes ? dead_bytes_ + appended - victim_bytes : 0;
    out.bytes_reclaimed = victim_bytes > appended ? victim_bytes - appended : 0;
  }
  std::lock_guard<std::mutex> st(stats_mu_);
  ++stats_.compactions;
  stats_.compacted_segments += out.segments;
  stats_.compacted_records += out.records_moved;
  stats_.reclaimed_bytes += out.bytes_reclaimed;
  return out;
}

StoreStats ChunkStore::stats() const {
  StoreStats s;
  {
    std::lock_guard<std::mutex> st(stats_mu_);
    s = stats_;
  }
  std::lock_guard<std::mutex> l(mu_);
  s.live_chunks = tree_.num_chunks();
  s.nodes = tree_.num_nodes() - 1;
  s.live_bytes = live_bytes_;
  s.dead_bytes = dead_bytes_;
  s.reordered_chunks = run_chunks_;
  s.reordered_bytes = run_bytes_;
  s.segments = segment_count_;
  return s;
}

ChunkStore::Location ChunkStore::TEST_location(uint32_t chunk, uint16_t layer) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!tree_.IsLive(chunk)) return Location{};
  return LocationOf(chunk, layer);
}

ChunkStore::Location ChunkStore::TEST_run_location(uint32_t chunk, uint16_t layer,
                                                  uint32_t record) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = run_of_.find(chunk);
  if (it == run_of_.end() || record >= it->second->records || layer >= opts_.layers) return Location{};
  return it->second->where[size_t{layer} * it->second->records + record];
}

ChunkStore::Location ChunkStore::LocationOf(uint32_t chunk, uint16_t layer) const {
  auto it = scattered_.find(chunk);
  if (it != scattered_.end()) return it->second[layer];
  if (chunk >= first_location_.size()) return Location{};
  Location at = first_location_[chunk];
  if (at.segment == 0) return at;
  at.block += layer * static_cast<uint32_t>(record_bytes(chunk_tokens_[chunk]) / kBlockSize);
  return at;
}

std::vector<ChunkStore::Location> ChunkStore::LocationsOf(uint32_t chunk) const {
  std::vector<Location> out(opts_.layers);
  for (uint16_t l = 0; l < opts_.layers; ++l) out[l] = LocationOf(chunk, l);
  return out;
}

void ChunkStore::SetLocations(uint32_t chunk, std::span<const Location> where) {
  if (first_location_.size() <= chunk) first_location_.resize(size_t{chunk} + 1);
  const uint32_t blocks = static_cast<uint32_t>(record_bytes(chunk_tokens_[chunk]) / kBlockSize);
  bool packed = true;
  for (uint16_t l = 1; l < opts_.layers && packed; ++l) {
    packed = where[l].segment == where[0].segment && where[l].block == where[0].block + l * blocks;
  }
  first_location_[chunk] = where[0];
  if (packed) {
    scattered_.erase(chunk);
  } else {
    scattered_[chunk].assign(where.begin(), where.end());
  }
}

void ChunkStore::ClearLocations(uint32_t chunk) {
  if (chunk < first_location_.size()) first_location_[chunk] = Location{};
  if (chunk < probe_block_.size()) probe_block_[chunk] = kNoProbe;
  scattered_.erase(chunk);
}

uint64_t ChunkStore::ChunkBytesLocked(uint32_t chunk) const {
  const uint32_t n = chunk_tokens_[chunk];
  const bool probe = chunk < probe_block_.size() && probe_block_[chunk] != kNoProbe;
  return opts_.layers * (record_bytes(n) + (probe ? probe_record_bytes(n) : 0));
}

ChunkStore::Location ChunkStore::ProbeLocationOf(uint32_t chunk, uint16_t layer) const {
  if (chunk >= probe_block_.size() || probe_block_[chunk] == kNoProbe) return Location{};
  const Location kv = LocationOf(chunk, 0);
  return Location{kv.segment, probe_block_[chunk] + layer * uint32_t{probe_stride_[chunk]}};
}

Status ChunkStore::ReadOnSide(std::span<ReadOp> ops) {
  IoBackend* io = nullptr;
  {
    std::unique_lock<std::mutex> l(side_mu_);
    side_cv_.wait(l, [&] { return !side_free_.empty(); });
    io = side_free_.back();
    side_free_.pop_back();
  }
  Status s = io->Read(ops);
  {
    std::lock_guard<std::mutex> l(side_mu_);
    side_free_.push_back(io);
  }
  side_cv_.notify_one();
  return s;
}

}  // namespace tierkv::store
