#include "store/manifest.h"

#include <xxhash.h>

#include <cstring>

namespace tierkv::store {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

class Reader {
 public:
  explicit Reader(const std::string& s, size_t end) : s_(s), end_(end) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > end_) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& s_;
  size_t end_;
  size_t pos_ = 0;
};

Status DecodeRuns(Reader& r, Manifest& m, size_t body) {
  auto bad = [](const std::string& what) { return Status::Corruption("manifest: " + what); };
  uint64_t nruns = 0;
  if (!r.Get(&nruns) || nruns > body) return bad("run count out of range");
  m.runs.resize(nruns);
  for (ManifestRun& run : m.runs) {
    uint32_t nchunks = 0;
    if (!r.Get(&run.first_token) || !r.Get(&run.rows) || !r.Get(&run.records) || !r.Get(&run.end_hash) ||
        !r.Get(&run.parent_hash) || !r.Get(&nchunks)) {
      return bad("truncated run");
    }
    const uint64_t C = m.chunk_tokens;
    if (run.rows == 0 || run.rows > 65536 || nchunks == 0 || nchunks > run.rows ||
        run.records != (run.rows + C - 1) / C || uint64_t{nchunks} * C < run.rows ||
        (uint64_t{nchunks} + uint64_t{m.layers} * run.records + uint64_t{m.layers} * run.rows) * 2 > body) {
      return bad("run geometry out of range");
    }
    run.hashes.resize(nchunks);
    for (uint64_t& h : run.hashes) {
      if (!r.Get(&h)) return bad("truncated run chunks");
    }
    run.where.resize(size_t{m.layers} * run.records);
    for (auto& [seg, block] : run.where) {
      if (!r.Get(&seg) || !r.Get(&block)) return bad("truncated run locations");
    }
    run.slot_of.resize(size_t{m.layers} * run.rows);
    for (uint16_t& slot : run.slot_of) {
      if (!r.Get(&slot)) return bad("truncated run mapping");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  std::string out(kManifestMagic, sizeof kManifestMagic);
  Put(&out, kManifestVersion);
  Put(&out, m.fingerprint);
  Put(&out, m.chunk_tokens);
  Put(&out, m.layers);
  Put(&out, m.log_from);
  Put(&out, m.sequence);
  Put(&out, static_cast<uint32_t>(m.segments.size()));
  for (uint32_t s : m.segments) Put(&out, s);
  Put(&out, static_cast<uint64_t>(m.chunks.size()));
  for (const ManifestChunk& c : m.chunks) {
    Put(&out, c.prefix_hash);
    Put(&out, c.parent_hash);
    Put(&out, c.first_token);
    Put(&out, static_cast<uint16_t>(c.tokens.size()));
    out.append(reinterpret_cast<const char*>(c.tokens.data()), c.tokens.size() * sizeof(int32_t));
    for (const auto& [seg, block] : c.where) {
      Put(&out, seg);
      Put(&out, block);
    }
    Put(&out, c.probe_block);
    Put(&out, c.probe_stride);
    Put(&out, c.pages);
    out.append(reinterpret_cast<const char*>(c.page_checksums.data()), c.page_checksums.size() * sizeof(uint64_t));
  }
  Put(&out, static_cast<uint64_t>(m.runs.size()));
  for (const ManifestRun& r : m.runs) {
    Put(&out, r.first_token);
    Put(&out, r.rows);
    Put(&out, r.records);
    Put(&out, r.end_hash);
    Put(&out, r.parent_hash);
    Put(&out, static_cast<uint32_t>(r.hashes.size()));
    for (uint64_t h : r.hashes) Put(&out, h);
    for (const auto& [seg, block] : r.where) {
      Put(&out, seg);
      Put(&out, block);
    }
    out.append(reinterpret_cast<const char*>(r.slot_of.data()), r.slot_of.size() * sizeof(uint16_t));
  }
  Put(&out, static_cast<uint64_t>(XXH3_64bits(out.data(), out.size())));
  return out;
}

Result<Manifest> DecodeManifest(const std::string& bytes) {
  auto bad = [](const std::string& what) { return Status::Corruption("manifest: " + what); };
  if (bytes.size() < sizeof kManifestMagic + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kManifestMagic, sizeof kManifestMagic) != 0) {
    return bad("bad magic (not a tierkv manifest)");
  }
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + body, sizeof sum);
  if (sum != XXH3_64bits(bytes.data(), body)) return bad("checksum mismatch");
  Reader r(bytes, body);
  char magic[sizeof kManifestMagic];
  for (char& c : magic) r.Get(&c);
  Manifest m;
  uint32_t version = 0, nseg = 0;
  uint64_t nchunks = 0;
  if (!r.Get(&version) || (version != 2 && version != kManifestVersion)) return bad("unsupported version");
  if (!r.Get(&m.fingerprint) || !r.Get(&m.chunk_tokens) || !r.Get(&m.layers) ||
      !r.Get(&m.log_from) || !r.Get(&m.sequence) || !r.Get(&nseg)) {
    return bad("truncated header");
  }
  if (m.layers == 0 || m.chunk_tokens == 0) return bad("zero layers or chunk size");
  if (nseg > body / sizeof(uint32_t)) return bad("segment count out of range");
  m.segments.resize(nseg);
  for (uint32_t& s : m.segments) {
    if (!r.Get(&s)) return bad("truncated segment list");
  }
  if (!r.Get(&nchunks) || nchunks > body) return bad("chunk count out of range");
  m.chunks.resize(nchunks);
  for (ManifestChunk& c : m.chunks) {
    uint16_t n = 0;
    if (!r.Get(&c.prefix_hash) || !r.Get(&c.parent_hash) || !r.Get(&c.first_token) || !r.Get(&n)) {
      return bad("truncated chunk");
    }
    if (n == 0 || n > m.chunk_tokens) return bad("chunk token count out of range");
    c.tokens.resize(n);
    for (int32_t& t : c.tokens) {
      if (!r.Get(&t)) return bad("truncated tokens");
    }
    c.where.resize(m.layers);
    for (auto& [seg, block] : c.where) {
      if (!r.Get(&seg) || !r.Get(&block)) return bad("truncated locations");
    }
    if (!r.Get(&c.probe_block) || !r.Get(&c.probe_stride)) return bad("truncated probe location");
    if (version >= 3) {
      if (!r.Get(&c.pages) || uint64_t{c.pages} * m.layers * 8 > body) return bad("page count out of range");
      c.page_checksums.resize(size_t{c.pages} * m.layers);
      for (uint64_t& x : c.page_checksums) {
        if (!r.Get(&x)) return bad("truncated page checksums");
      }
    }
  }
  if (version >= 3) RETURN_IF_ERROR(DecodeRuns(r, m, body));
  if (r.pos() != body) return bad("trailing bytes");
  return m;
}

}  // namespace tierkv::store
