#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tierkv/tools/io_bench.h"
#include "commands.h"

namespace tierkv::app {

void AddBenchIo(CLI::App& app, Action* run) {
  struct Args {
    std::string dir;
    bench::IoBenchOptions o;
    bool keep = false;
    bool json = false;
    bool calibrate = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench-io",
      "Read path of the disk tier: O_DIRECT reads of chunk records (checksums verified) per "
      "chunk size, backend and queue depth, each next to the disk's sequential read ceiling "
      "measured right before and after it (--read-mib each time)");
  sub->add_option("--dir", a->dir,
                  "Scratch directory on the disk to measure (needs O_DIRECT; tmpfs will not do); "
                  "default: a new directory under $TMPDIR or /var/tmp, removed afterwards");
  sub->add_option("--chunk-tokens", a->o.chunk_tokens, "Tokens per chunk (comma-separated list)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--backends", a->o.backends, "I/O backends: uring, pread (comma-separated list)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"uring", "pread"}));
  sub->add_option("--depths", a->o.depths, "Queue depths (comma-separated list)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--layers", a->o.layers, "Layers (default: the default model's)")
      ->capture_default_str();
  sub->add_option("--row-bytes", a->o.row_bytes,
                  "Bytes of one token's K in one layer (default: the default model's 16 heads x "
                  "16 dims x fp16)")
      ->capture_default_str();
  sub->add_option("--data-mib", a->o.data_mib, "MiB of records written per chunk size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--read-mib", a->o.read_mib, "MiB read per measured point")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--keep", a->keep, "Keep the written records");
  sub->add_flag("--calibrate", a->calibrate,
                "Measure the read planner's cost model instead (fixed cost per read and bandwidth, "
                "at the store's backend and queue depth: the first of --backends/--depths when "
                "given, else auto and 32) and save it as IO-MODEL in --dir, the cache directory "
                "(a store measures it by itself when the file is missing or from another machine)");
  sub->add_flag("--json", a->json, "Print JSON instead of a table");
  sub->callback([a, run, sub] {
    const bool backend_given = sub->count("--backends") > 0, depth_given = sub->count("--depths") > 0;
    *run = [a, backend_given, depth_given]() -> int {
      if (a->calibrate) {
        if (a->dir.empty()) return Fail("--calibrate needs --dir, the cache directory to measure and save the model in");
        const std::string backend = backend_given ? a->o.backends.front() : "auto";
        const int depth = depth_given ? a->o.depths.front() : 32;
        if (depth < 1 || depth > 4096) return Fail("--depths " + std::to_string(depth) + " is outside 1..4096");
        auto m = bench::CalibrateCacheDir(a->dir, backend, static_cast<uint32_t>(depth), [](const std::string& msg) {
          std::fprintf(stderr, "bench-io: %s\n", msg.c_str());
        });
        if (!m.ok()) return Fail(m.status().ToString());
        std::printf("%s\n", a->json ? bench::IoModelReportToJson(*m).c_str() : bench::IoModelReportToText(*m).c_str());
        return 0;
      }
      bool made = false;
      if (a->dir.empty()) {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/var/tmp") + "/tierkv-bench-io-XXXXXX";
        if (!::mkdtemp(tmpl.data())) return Fail("cannot create a scratch directory " + tmpl);
        a->dir = tmpl;
        made = true;
      }
      a->o.dir = a->dir;
      a->o.progress = [](const std::string& m) { std::fprintf(stderr, "bench-io: %s\n", m.c_str()); };
      for (int c : a->o.chunk_tokens) {
        if (c < 1 || c > 1024) return Fail("--chunk-tokens " + std::to_string(c) + " is outside 1..1024");
      }
      for (int d : a->o.depths) {
        if (d < 1 || d > 4096) return Fail("--depths " + std::to_string(d) + " is outside 1..4096");
      }
      auto r = bench::RunIoBench(a->o);
      if (made && !a->keep) {
        std::error_code ec;
        std::filesystem::remove_all(a->dir, ec);
      }
      if (!r.ok()) return Fail(r.status().ToString());
      std::printf("%s\n", a->json ? bench::IoReportToJson(*r).c_str() : bench::IoReportToText(*r).c_str());
      return 0;
    };
  });
}

}  // namespace tierkv::app
