#include "tierkv/tools/io_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "store/chunk_store.h"
#include "store/io_model.h"
#include "tierkv/elapsed.h"
#include "tierkv/filesystem.h"

namespace tierkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

store::StoreOptions StoreOpts(const IoBenchOptions& o, int chunk, const std::string& backend,
                              int depth) {
  store::StoreOptions s;
  s.dir = o.dir + "/c" + std::to_string(chunk);
  s.fingerprint = 0x10be7c4ULL + static_cast<uint64_t>(chunk);
  s.model_description = "bench-io";
  s.chunk_tokens = static_cast<uint32_t>(chunk);
  s.layers = o.layers;
  s.row_bytes = o.row_bytes;
  s.disk.io_backend = backend;
  s.queue_depth = static_cast<uint32_t>(depth);
  return s;
}

struct Target {
  uint32_t chunk;
  uint64_t prefix_hash;
  uint16_t layer;
  uint32_t tokens;
};

// Every (chunk, layer) of the prompts in this open store. Chunk ids belong
// to one open store (recovery numbers them afresh), so they are looked up
// again after every Open.
std::vector<Target> TargetsOf(store::ChunkStore& st, const std::vector<std::vector<int32_t>>& prompts,
                              uint16_t layers) {
  std::vector<Target> targets;
  for (const auto& p : prompts) {
    store::LookupResult m = st.Lookup(p);
    for (size_t c = 0; c < m.chunks.size(); ++c) {
      for (uint16_t l = 0; l < layers; ++l) {
        targets.push_back({m.chunks[c], m.prefix_hashes[c], l, m.chunk_tokens[c]});
      }
    }
  }
  return targets;
}

// Fills a store with random prompts until it holds `mib` of records; returns
// the prompts.
Result<std::vector<std::vector<int32_t>>> Fill(const IoBenchOptions& o, int chunk) {
  ASSIGN_OR_RETURN(auto st, store::ChunkStore::Open(StoreOpts(o, chunk, "auto", 32)));
  const size_t prompt_tokens = 2048;
  std::vector<std::string> k(o.layers), v(o.layers);
  std::mt19937_64 rng(static_cast<uint64_t>(chunk));
  store::KvInput kv;
  for (uint16_t l = 0; l < o.layers; ++l) {
    k[l].resize(prompt_tokens * o.row_bytes);
    v[l].resize(prompt_tokens * o.row_bytes);
    for (auto* s : {&k[l], &v[l]}) {
      for (size_t i = 0; i + 8 <= s->size(); i += 8) {
        uint64_t x = rng();
        std::memcpy(s->data() + i, &x, 8);
      }
    }
    kv.k.emplace_back(k[l]);
    kv.v.emplace_back(v[l]);
  }
  std::vector<std::vector<int32_t>> prompts;
  while (st->stats().live_bytes < (o.data_mib << 20)) {
    std::vector<int32_t> tokens(prompt_tokens);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % 4096);
    ASSIGN_OR_RETURN(auto r, st->Put(tokens, kv));
    (void)r;
    prompts.push_back(std::move(tokens));
  }
  return prompts;
}

// Sequential 1 MiB O_DIRECT reads, 16 in flight, io_uring when available:
// what the device gives at its best. Reads `mib` of the chunk size's
// segments starting at *cursor (advanced, wrapping), so that consecutive
// measurements read different data.
Result<double> Ceiling(const IoBenchOptions& o, int chunk, uint64_t mib, uint64_t* cursor) {
  FileSystem* fs = FileSystem::Default();
  ASSIGN_OR_RETURN(auto io, store::NewIoBackend("auto", store::IoOptions{16}));
  const size_t piece = 1 << 20;
  store::AlignedBuffer buf = store::AllocateAligned(piece * 16);
  const std::string dir = o.dir + "/c" + std::to_string(chunk);
  ASSIGN_OR_RETURN(auto names, fs->ListDir(dir));
  std::sort(names.begin(), names.end());
  std::vector<std::unique_ptr<RandomAccessFile>> files;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& name : names) {
    if (name.rfind("seg-", 0) != 0) continue;
    FileOptions fo;
    fo.direct_io = true;
    ASSIGN_OR_RETURN(auto file, fs->NewRandomAccessFile(dir + "/" + name, fo));
    ASSIGN_OR_RETURN(uint64_t size, file->Size());
    size = size / piece * piece;
    if (size == 0) continue;
    files.push_back(std::move(file));
    sizes.push_back(size);
    total += size;
  }
  if (total == 0) return Status::Corruption("bench-io: no segment data to measure the ceiling on");
  uint64_t bytes = 0;
  auto t0 = Clock::now();
  while (bytes < (mib << 20)) {
    std::vector<store::ReadOp> ops;
    for (size_t i = 0; i < 16; ++i) {
      uint64_t at = *cursor % total;
      size_t f = 0;
      while (at >= sizes[f]) at -= sizes[f++];
      store::ReadOp op;
      op.file = files[f].get();
      op.offset = at;
      op.length = piece;
      op.buf = buf.get() + i * piece;
      ops.push_back(op);
      *cursor += piece;
    }
    RETURN_IF_ERROR(io->Read(ops));
    for (auto& op : ops) {
      RETURN_IF_ERROR(op.status);
      bytes += op.done;
    }
  }
  return bytes / SecondsSince(t0) / 1e6;
}

}  // namespace

Result<IoBenchReport> RunIoBench(const IoBenchOptions& o) {
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  IoBenchReport rep;
  rep.dir = o.dir;
  RETURN_IF_ERROR(FileSystem::Default()->CreateDir(o.dir));
  std::vector<std::vector<std::vector<int32_t>>> prompts;
  for (int chunk : o.chunk_tokens) {
    say("writing " + std::to_string(o.data_mib) + " MiB of " + std::to_string(chunk) +
        "-token chunk records");
    ASSIGN_OR_RETURN(auto t, Fill(o, chunk));
    prompts.push_back(std::move(t));
  }
  std::vector<double> ceilings;
  for (size_t ci = 0; ci < o.chunk_tokens.size(); ++ci) {
    const int chunk = o.chunk_tokens[ci];
    uint64_t cursor = 0;
    ASSIGN_OR_RETURN(double ceiling, Ceiling(o, chunk, o.read_mib, &cursor));
    ceilings.push_back(ceiling);
    for (const std::string& backend : o.backends) {
      for (int depth : o.depths) {
        say("chunk " + std::to_string(chunk) + " " + backend + " depth " + std::to_string(depth));
        ASSIGN_OR_RETURN(auto st, store::ChunkStore::Open(StoreOpts(o, chunk, backend, depth)));
        std::vector<Target> order = TargetsOf(*st, prompts[ci], o.layers);
        if (order.empty()) return Status::Corruption("bench-io: the store lost its records");
        std::mt19937 rng(static_cast<uint32_t>(chunk * 100 + depth));
        std::shuffle(order.begin(), order.end(), rng);
        const uint64_t record = st->record_bytes(static_cast<uint32_t>(chunk));
        const size_t batch = static_cast<size_t>(std::max(depth * 4, 64));
        std::vector<std::string> k(batch, std::string(size_t{o.row_bytes} * chunk, '\0'));
        std::vector<std::string> v = k;
        uint64_t before = st->stats().bytes_read, reads = 0;
        auto t0 = Clock::now();
        size_t next = 0;
        while (st->stats().bytes_read - before < (o.read_mib << 20)) {
          std::vector<store::ChunkRead> rs;
          for (size_t i = 0; i < batch; ++i) {
            const Target& t = order[next++ % order.size()];
            rs.push_back(store::ChunkRead{t.chunk, t.prefix_hash, t.layer, k[i].data(), v[i].data()});
          }
          RETURN_IF_ERROR(st->Read(rs));
          for (auto& r : rs) RETURN_IF_ERROR(r.status);
          reads += rs.size();
        }
        double secs = SecondsSince(t0);
        IoPoint p;
        p.chunk_tokens = chunk;
        p.record_bytes = record;
        p.backend = std::string(backend);
        p.depth = depth;
        p.mb_per_s = static_cast<double>(st->stats().bytes_read - before) / secs / 1e6;
        p.reads_per_s = static_cast<double>(reads) / secs;
        // The ceiling right after this point is the one before the next.
        p.ceiling_before = ceiling;
        ASSIGN_OR_RETURN(ceiling, Ceiling(o, chunk, o.read_mib, &cursor));
        ceilings.push_back(ceiling);
        p.ceiling_after = ceiling;
        p.fraction_of_ceiling = p.mb_per_s / ((p.ceiling_before + p.ceiling_after) / 2);
        rep.points.push_back(p);
      }
    }
  }
  rep.ceiling_min = *std::min_element(ceilings.begin(), ceilings.end());
  rep.ceiling_max = *std::max_element(ceilings.begin(), ceilings.end());
  return rep;
}

std::string IoReportToJson(const IoBenchReport& r) {
  std::ostringstream s;
  s << "{\"dir\": " << nlohmann::json(r.dir).dump() << ", \"ceiling_min\": " << r.ceiling_min
    << ", \"ceiling_max\": " << r.ceiling_max << ", \"points\": [";
  for (size_t i = 0; i < r.points.size(); ++i) {
    const IoPoint& p = r.points[i];
    s << (i ? ", " : "") << "{\"chunk_tokens\": " << p.chunk_tokens
      << ", \"record_bytes\": " << p.record_bytes << ", \"backend\": \"" << p.backend
      << "\", \"depth\": " << p.depth << ", \"mb_per_s\": " << p.mb_per_s
      << ", \"reads_per_s\": " << p.reads_per_s << ", \"ceiling_before\": " << p.ceiling_before
      << ", \"ceiling_after\": " << p.ceiling_after
      << ", \"fraction_of_ceiling\": " << p.fraction_of_ceiling << "}";
  }
  s << "]}";
  return s.str();
}

std::string IoReportToText(const IoBenchReport& r) {
  std::ostringstream s;
  char line[256];
  std::snprintf(line, sizeof line,
                "sequential read ceiling (1 MiB O_DIRECT reads, 16 in flight), measured before "
                "and after every point: %.0f to %.0f MB/s over the run\n\n",
                r.ceiling_min, r.ceiling_max);
  s << line;
  s << "| chunk tokens | record KiB | backend | depth | MB/s | reads/s | ceiling before/after | of ceiling |\n";
  s << "|---:|---:|---|---:|---:|---:|---:|---:|\n";
  for (const IoPoint& p : r.points) {
    std::snprintf(line, sizeof line, "| %d | %.0f | %s | %d | %.0f | %.0f | %.0f / %.0f | %.0f%% |\n",
                  p.chunk_tokens, p.record_bytes / 1024.0, p.backend.c_str(), p.depth, p.mb_per_s,
                  p.reads_per_s, p.ceiling_before, p.ceiling_after, 100 * p.fraction_of_ceiling);
    s << line;
  }
  return s.str();
}

Result<IoModelReport> CalibrateCacheDir(const std::string& dir, const std::string& backend,
                                        uint32_t queue_depth,
                                        std::function<void(const std::string&)> progress) {
  RETURN_IF_ERROR(FileSystem::Default()->CreateDir(dir).WithContext("cache directory " + dir));
  ASSIGN_OR_RETURN(auto io, store::NewIoBackend(backend, store::IoOptions{queue_depth}));
  store::CalibrateOptions c;
  c.progress = std::move(progress);
  ASSIGN_OR_RETURN(store::IoCostModel m, store::CalibrateIo(dir, *io, c));
  RETURN_IF_ERROR(store::SaveIoModel(dir, m));
  IoModelReport r;
  r.dir = dir;
  r.machine = m.machine.ToString();
  r.per_io_us = m.per_io_us;
  r.mb_per_s = m.mb_per_s;
  r.merge_gap_blocks = m.MergeGapBlocks();
  return r;
}

std::string IoModelReportToJson(const IoModelReport& r) {
  nlohmann::json j;
  j["dir"] = r.dir;
  j["machine"] = r.machine;
  j["per_io_us"] = r.per_io_us;
  j["mb_per_s"] = r.mb_per_s;
  j["merge_gap_blocks"] = r.merge_gap_blocks;
  return j.dump(2);
}

std::string IoModelReportToText(const IoModelReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "io model of %s (%s):\n  fixed cost per read  %.2f us\n  bandwidth            %.0f MB/s\n"
                "  with --read-planner model, gaps of up to %u blocks (4 KiB) are read through, not skipped\n"
                "saved as %s/IO-MODEL",
                r.dir.c_str(), r.machine.c_str(), r.per_io_us, r.mb_per_s, r.merge_gap_blocks,
                r.dir.c_str());
  return buf;
}

}  // namespace tierkv::bench
