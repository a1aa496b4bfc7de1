#include <cstdio>

#include "tierkv/tools/policy_trace.h"
#include "commands.h"

namespace tierkv::app {

void AddSimCache(CLI::App& app, Action* run) {
  auto o = std::make_shared<sim::PolicyTraceOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "sim-cache",
      "Replays one synthetic trace (Zipf popularity, important-row ratio independent of it) "
      "through the device and host pools under each cache policy, and reports the share of "
      "requested important rows found on the device");
  sub->add_option("--policies", o->policies, "Policies: lru, lfu, score, car (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"lru", "lfu", "score", "car"}))
      ->capture_default_str();
  sub->add_option("--chunks", o->chunks, "Distinct chunks")->check(CLI::Range(2, 100000000))
      ->capture_default_str();
  sub->add_option("--accesses", o->accesses, "Chunk accesses in the trace")
      ->check(CLI::Range(1, 1000000000))
      ->capture_default_str();
  sub->add_option("--zipf", o->zipf_s, "Zipf exponent of popularity")->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  sub->add_option("--device-fraction", o->device_fraction, "Device pool, as a share of the chunks")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--host-fraction", o->host_fraction, "Host pool, as a share of the chunks")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--rows", o->rows, "Rows per chunk")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--min-ratio", o->min_ratio, "Important-row ratios are uniform in [this, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  sub->add_flag("--json", *json, "Print one JSON object");
  sub->callback([o, json, run] {
    *run = [o, json]() -> int {
      auto r = sim::RunPolicyTrace(*o);
      if (!r.ok()) return Fail(r.status().ToString());
      if (*json) {
        std::printf("{\"policies\": {");
        for (size_t i = 0; i < r->size(); ++i) {
          const auto& x = (*r)[i];
          std::printf("%s\"%s\": {\"device_important_hit_ratio\": %.4f, \"device_hit_ratio\": %.4f, "
                      "\"host_important_hit_ratio\": %.4f, \"promotions\": %llu, "
                      "\"important_rows_to_device\": %llu}",
                      i ? ", " : "", x.policy.c_str(), x.device_important_hit_ratio,
                      x.device_hit_ratio, x.host_important_hit_ratio,
                      static_cast<unsigned long long>(x.promotions),
                      static_cast<unsigned long long>(x.important_rows_to_device));
        }
        std::printf("}}\n");
      } else {
        std::printf("%d chunks, %d accesses, Zipf %.2f, device %.0f%% and host %.0f%% of the "
                    "chunks, important-row ratio uniform in [%.2f, 1]\n\n",
                    o->chunks, o->accesses, o->zipf_s, 100 * o->device_fraction,
                    100 * o->host_fraction, o->min_ratio);
        std::printf("| policy | device hits, important rows | device hits, chunks | host hits, "
                    "important rows | important rows moved to the device |\n"
                    "|---|---:|---:|---:|---:|\n");
        for (const auto& x : *r) {
          std::printf("| %s | %.3f | %.3f | %.3f | %llu |\n", x.policy.c_str(),
                      x.device_important_hit_ratio, x.device_hit_ratio, x.host_important_hit_ratio,
                      static_cast<unsigned long long>(x.important_rows_to_device));
        }
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app
