#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "tierkv/engine.h"
#include "tierkv/remote.h"
#include "tierkv/store.h"

namespace tierkv::app {
namespace {

// Exit code of `verify` when damaged records were found and not repaired.
constexpr int kDamageFound = 3;

nlohmann::json VerifyJson(const store::VerifyReport& v) {
  nlohmann::json damaged = nlohmann::json::array();
  for (const auto& d : v.damaged) {
    damaged.push_back({{"segment", d.segment}, {"offset", d.offset}, {"kind", d.kind},
                       {"chunk", d.chunk}, {"layer", d.layer}, {"error", d.error}});
  }
  return {{"records", v.records}, {"bytes", v.bytes}, {"damaged", damaged},
          {"dropped_chunks", v.dropped_chunks}, {"repaired", v.repaired}};
}

void PrintVerify(const store::VerifyReport& v) {
  std::printf("verified         %" PRIu64 " records (%" PRIu64 " bytes): %zu damaged\n", v.records,
              v.bytes, v.damaged.size());
  for (const auto& d : v.damaged) {
    std::printf("  %s offset %" PRIu64 ": %s record of chunk %u layer %u: %s\n", d.segment.c_str(),
                d.offset, d.kind.c_str(), d.chunk, d.layer, d.error.c_str());
  }
  if (v.repaired) {
    std::printf("repaired         %" PRIu64 " chunks dropped (with their descendants); a new "
                "manifest records it\n", v.dropped_chunks);
  }
}

// One JSON object; paths and the model description are the user's
// (escaped by nlohmann).
void PrintReportJson(const store::StoreReport& o, const RemoteInventory* remote) {
  const store::StoreStats& s = o.stats;
  std::printf("{\"cache_dir\": %s, \"fingerprint\": \"%016" PRIx64
              "\", \"model\": %s, \"chunk_tokens\": %u, \"layers\": %u, "
              "\"row_bytes\": %u, \"probe_bytes\": %u, \"dtype\": \"%s\", \"nodes\": %" PRIu64
              ", \"chunks\": %" PRIu64 ", \"bytes\": {\"device\": 0, \"host\": 0, \"disk\": %" PRIu64
              "}, \"live_bytes\": %" PRIu64 ", \"dead_bytes\": %" PRIu64
              ", \"skipped_records\": %" PRIu64 ", \"recovery_us\": %" PRIu64
              ", \"manifest_chunks\": %" PRIu64 ", \"manifest_errors\": %" PRIu64
              ", \"scanned_segments\": %" PRIu64 ", \"segments\": [",
              nlohmann::json(o.dir).dump().c_str(), o.fingerprint, nlohmann::json(o.model).dump().c_str(),
              o.chunk_tokens, o.layers, o.row_bytes, o.probe_bytes, o.dtype.c_str(), s.nodes,
              s.live_chunks, s.live_bytes + s.dead_bytes, s.live_bytes, s.dead_bytes,
              s.skipped_records, s.recovery_us, s.manifest_chunks, s.manifest_errors,
              s.scanned_segments);
  for (size_t i = 0; i < o.segments.size(); ++i) {
    std::printf("%s{\"name\": %s, \"bytes\": %" PRIu64 ", \"live_bytes\": %" PRIu64 "}", i ? ", " : "",
                nlohmann::json(o.segments[i].first).dump().c_str(), o.segments[i].second,
                o.segment_live_bytes[i]);
  }
  std::printf("]");
  const nlohmann::json io = {{"source", o.io_source}, {"per_io_us", o.io_per_io_us},
                             {"mb_per_s", o.io_mb_per_s}, {"merge_gap_blocks", o.io_merge_gap_blocks}};
  std::printf(", \"io_model\": %s", io.dump().c_str());
  if (o.verified) std::printf(", \"verify\": %s", VerifyJson(o.verify).dump().c_str());
  if (remote != nullptr) {
    const nlohmann::json r = {{"servers", remote->servers}, {"ping_ms", remote->ping_ms},
                              {"chunks", remote->chunks}, {"chunk_layers", remote->chunk_layers},
                              {"bytes", remote->bytes}};
    std::printf(", \"remote\": %s", r.dump().c_str());
  }
  std::printf("}\n");
}

void PrintReport(const store::StoreReport& o) {
  const store::StoreStats& s = o.stats;
  std::printf("cache directory  %s\n", o.dir.c_str());
  std::printf("model            %s (fingerprint %016" PRIx64 ")\n",
              o.model.empty() ? "?" : o.model.c_str(), o.fingerprint);
  std::printf("geometry         %u tokens per chunk, %u layers, %u bytes per token row, %s\n",
              o.chunk_tokens, o.layers, o.row_bytes, o.dtype.c_str());
  if (o.probe_bytes != 0) {
    std::printf("probe keys       %u bytes per token, one copy per chunk and layer\n", o.probe_bytes);
  } else {
    std::printf("probe keys       none stored (sliced from K records when asked for)\n");
  }
  std::printf("index            %" PRIu64 " nodes, %" PRIu64 " chunks\n", s.nodes, s.live_chunks);
  std::printf("bytes per tier   device 0, host 0 (pools of running processes), disk %" PRIu64
              " (%" PRIu64 " live, %" PRIu64 " dead)\n",
              s.live_bytes + s.dead_bytes, s.live_bytes, s.dead_bytes);
  std::printf("recovery         %.1f ms, %" PRIu64 " records skipped (torn, corrupt, orphaned "
              "or foreign)\n", s.recovery_us / 1000.0, s.skipped_records);
  std::printf("manifest         %s: %" PRIu64 " chunks from it, %" PRIu64 " segments scanned after it\n",
              s.manifest_errors    ? "damaged (every segment scanned)"
              : o.manifest_present ? "present"
                                   : "absent",
              s.manifest_chunks, s.scanned_segments);
  std::printf("read planner     %s cost model: %.2f us per read, %.0f MB/s; with --read-planner "
              "model, gaps up to %u blocks are read through\n", o.io_source.c_str(), o.io_per_io_us, o.io_mb_per_s,
              o.io_merge_gap_blocks);
  std::printf("segments         %zu\n", o.segments.size());
  for (size_t i = 0; i < o.segments.size(); ++i) {
    std::printf("  %s  %" PRIu64 " bytes, %" PRIu64 " live\n", o.segments[i].first.c_str(), o.segments[i].second,
                o.segment_live_bytes[i]);
  }
  if (o.verified) PrintVerify(o.verify);
}

}  // namespace

void AddInspect(CLI::App& app, Action* run) {
  struct Args {
    std::string dir, remote;
    bool json = false, quick = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Prints a cache directory's state: model fingerprint, geometry, nodes, chunks, bytes, "
      "segments and dead bytes, and (unless --quick) reads and checks every record of every "
      "stored chunk, listing damaged ones (read-only; safe on a directory a server is using). "
      "The device and host pools live in a running process and are not on disk");
  sub->add_option("--cache-dir", a->dir, "The cache directory")->required();
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->add_flag("--quick", a->quick, "Skip reading the records (the index and files only)");
  sub->add_option("--remote", a->remote,
                  "Also scan a remote tier (redis://HOST:PORT[/DB] or redis-cluster://HOST:PORT,...) for "
                  "this directory's model: chunks, chunk layers and bytes stored there (the hit, miss "
                  "and error counters of running processes are on their /metrics)");
  sub->callback([a, run] {
    *run = [a]() -> int {
      store::InspectOptions io;
      io.owner_files = engine::OwnerFiles();
      io.verify = !a->quick;
      auto report = store::InspectStore(a->dir, io);
      if (!report.ok()) return Fail(report.status().ToString());
      Result<RemoteInventory> remote = RemoteInventory{};
      if (!a->remote.empty()) remote = InspectRemote(a->remote, report->fingerprint);
      if (!remote.ok()) return Fail(remote.status().WithContext("--remote").ToString());
      if (a->json) {
        PrintReportJson(*report, a->remote.empty() ? nullptr : &*remote);
      } else {
        PrintReport(*report);
        if (!a->remote.empty()) {
          std::printf("remote tier      %s: %zu servers (slowest PING %.2f ms); this model: %" PRIu64
                      " chunks, %" PRIu64 " chunk layers, %" PRIu64 " bytes\n",
                      a->remote.c_str(), remote->servers, remote->ping_ms, remote->chunks,
                      remote->chunk_layers, remote->bytes);
        }
      }
      return 0;
    };
  });
}

void AddVerify(CLI::App& app, Action* run) {
  struct Args {
    std::string dir;
    bool json = false, repair = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "verify",
      "Reads and checks every record of every chunk a cache directory holds (identity, "
      "checksums) and lists damaged ones by segment and offset. Exit 0: none damaged (or "
      "repaired); 3: damage found and not repaired; 1: the directory could not be read");
  sub->add_option("--cache-dir", a->dir, "The cache directory")->required();
  sub->add_flag("--repair", a->repair,
                "Drop the damaged chunks (with the chunks stored after them) from the index, "
                "durably; needs the directory to itself");
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->callback([a, run] {
    *run = [a]() -> int {
      store::InspectOptions io;
      io.owner_files = engine::OwnerFiles();
      io.repair = a->repair;
      auto report = store::InspectStore(a->dir, io);
      if (!report.ok()) return Fail(report.status().ToString());
      if (a->json) {
        nlohmann::json j = VerifyJson(report->verify);
        j["cache_dir"] = a->dir;
        std::printf("%s\n", j.dump().c_str());
      } else {
        PrintVerify(report->verify);
      }
      return report->verify.damaged.empty() || report->verify.repaired ? 0 : kDamageFound;
    };
  });
}

}  // namespace tierkv::app
