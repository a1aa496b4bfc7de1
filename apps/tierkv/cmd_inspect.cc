#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "tierkv/store.h"
#include "tierkv/commands.h"

namespace tierkv::app {

void AddInspect(CLI::App& app, Action* run) {
  struct Args {
    std::string dir;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Prints a cache directory's state: model fingerprint, geometry, nodes, chunks, bytes, "
      "segments and dead bytes, after verifying every record (read-only; safe on a directory a "
      "server is using). The device and host pools live in a running process and are not on disk");
  sub->add_option("--cache-dir", a->dir, "The cache directory")->required();
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto report = store::InspectStore(a->dir);
      if (!report.ok()) return Fail(report.status().ToString());
      const store::StoreReport& o = *report;
      const store::StoreStats& s = o.stats;
      const auto& segs = o.segments;
      const uint64_t disk_bytes = s.live_bytes + s.dead_bytes;
      if (a->json) {
        // Paths and the model description are the user's: escaped by nlohmann.
        std::printf("{\"cache_dir\": %s, \"fingerprint\": \"%016" PRIx64
                    "\", \"model\": %s, \"chunk_tokens\": %u, \"layers\": %u, "
                    "\"row_bytes\": %u, \"probe_bytes\": %u, \"dtype\": \"%s\", \"nodes\": %" PRIu64
                    ", \"chunks\": %" PRIu64 ", \"bytes\": {\"device\": 0, \"host\": 0, \"disk\": %" PRIu64
                    "}, \"live_bytes\": %" PRIu64 ", \"dead_bytes\": %" PRIu64
                    ", \"skipped_records\": %" PRIu64 ", \"recovery_us\": %" PRIu64
                    ", \"manifest_chunks\": %" PRIu64 ", \"manifest_errors\": %" PRIu64
                    ", \"scanned_segments\": %" PRIu64 ", \"segments\": [",
                    nlohmann::json(a->dir).dump().c_str(), o.fingerprint,
                    nlohmann::json(o.model).dump().c_str(), o.chunk_tokens,
                    o.layers, o.row_bytes, o.probe_bytes,
                    o.dtype.c_str(), s.nodes,
                    s.live_chunks, disk_bytes, s.live_bytes, s.dead_bytes, s.skipped_records,
                    s.recovery_us, s.manifest_chunks, s.manifest_errors, s.scanned_segments);
        for (size_t i = 0; i < segs.size(); ++i) {
          std::printf("%s{\"name\": \"%s\", \"bytes\": %" PRIu64 "}", i ? ", " : "",
                      segs[i].first.c_str(), segs[i].second);
        }
        std::printf("]}\n");
        return 0;
      }
      std::printf("cache directory  %s\n", a->dir.c_str());
      std::printf("model            %s (fingerprint %016" PRIx64 ")\n",
                  o.model.empty() ? "?" : o.model.c_str(), o.fingerprint);
      std::printf("geometry         %u tokens per chunk, %u layers, %u bytes per token row, %s\n",
                  o.chunk_tokens, o.layers, o.row_bytes,
                  o.dtype.c_str());
      if (o.probe_bytes != 0) {
        std::printf("probe keys       %u bytes per token, one copy per chunk and layer\n",
                    o.probe_bytes);
      } else {
        std::printf("probe keys       none stored (sliced from K records when asked for)\n");
      }
      std::printf("index            %" PRIu64 " nodes, %" PRIu64 " chunks\n", s.nodes, s.live_chunks);
      std::printf("bytes per tier   device 0, host 0 (pools of running processes), disk %" PRIu64
                  " (%" PRIu64 " live, %" PRIu64 " dead)\n",
                  disk_bytes, s.live_bytes, s.dead_bytes);
      std::printf("recovery         %.1f ms, %" PRIu64 " records skipped (torn, corrupt, orphaned "
                  "or foreign)\n",
                  s.recovery_us / 1000.0, s.skipped_records);
      std::printf("manifest         %s: %" PRIu64 " chunks from it, %" PRIu64
                  " segments scanned after it\n",
                  s.manifest_errors                          ? "damaged (every segment scanned)"
                  : o.manifest_present                        ? "present"
                                                             : "absent",
                  s.manifest_chunks, s.scanned_segments);
      std::printf("segments         %zu\n", segs.size());
      for (const auto& [name, size] : segs) {
        std::printf("  %s  %" PRIu64 " bytes\n", name.c_str(), size);
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app
