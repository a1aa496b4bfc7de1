#include "tierkv/tools/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/sgemm_peak.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "tierkv/elapsed.h"
#include "tierkv/filesystem.h"
#include "tierkv/process.h"
#include "util/thread_pool.h"

namespace tierkv::bench {
namespace {


// One layer's side kernel: every KV head's attention (or weights only) of
// `q` new tokens over `rows` fp16 prefix rows, heads on the compute threads.
double KernelSeconds(const ModelConfig& c, int q, int rows, bool values, int repeats) {
  const int H = c.n_kv_heads, hd = c.head_dim(), group = c.group();
  const size_t kvd = static_cast<size_t>(c.kv_dim());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> qs(static_cast<size_t>(q) * c.dim), kn(q * kvd), vn(q * kvd);
  for (auto& x : qs) x = u(rng);
  for (auto& x : kn) x = u(rng);
  for (auto& x : vn) x = u(rng);
  std::vector<uint16_t> keys(rows * kvd), vals(rows * kvd);
  for (auto& x : keys) x = static_cast<uint16_t>(0x3000 + rng() % 0x800);  // fp16 in [0.125, 0.5)
  for (auto& x : vals) x = static_cast<uint16_t>(0x3000 + rng() % 0x800);
  std::vector<float> out(static_cast<size_t>(q) * c.dim);
  std::vector<std::vector<float>> colsum(H, std::vector<float>(static_cast<size_t>(group) * rows));
  auto layer = [&] {
    ThreadPool::Compute()->ParallelFor(H, [&](int h) {
      thread_local kernels::AttentionScratch scratch;
      kernels::AttentionArgs a;
      a.n_new = q;
      a.head_dim = hd;
      a.group = group;
      a.q = qs.data() + static_cast<size_t>(h) * group * hd;
      a.q_stride = static_cast<size_t>(c.dim);
      a.k_new = kn.data() + static_cast<size_t>(h) * hd;
      a.v_new = vn.data() + static_cast<size_t>(h) * hd;
      a.kv_new_stride = kvd;
      a.prefix = KvRows{keys.data() + static_cast<size_t>(h) * hd, vals.data() + static_cast<size_t>(h) * hd,
                        KvDType::kF16, static_cast<size_t>(rows), kvd, kvd, nullptr};
      if (values) {
        a.out = out.data() + static_cast<size_t>(h) * group * hd;
        a.out_stride = static_cast<size_t>(c.dim);
      } else {
        a.colsum = colsum[h].data();
      }
      kernels::AttendKvGroup(a, &scratch);
    });
  };
  layer();  // warm-up
  double best = 1e30;
  const int inner = 20;
  for (int rep = 0; rep < repeats; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) layer();
    best = std::min(best, SecondsSince(t0) / inner);
  }
  return best;
}

double Mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// llama.cpp's tokens/s for a batch of `tokens`, 0 if it did not run it.
double LlamaCppTokensPerS(const LlamaCppPrefill& l, int tokens) {
  for (const auto& p : l.prefill) {
    if (p.tokens == tokens) return p.tokens_per_s;
  }
  return 0;
}

// The prefill ratio and resident sizes beside llama.cpp's, when it ran.
std::string LlamaCppText(const EngineBenchReport& r) {
  std::string s;
  char buf[512];
  if (r.resident_after_load > 0) {
    std::snprintf(buf, sizeof buf, "resident: %.1f MB before the model, %.1f MB after loading it, %.1f MB after the prefills\n",
                  Mb(r.resident_before_load), Mb(r.resident_after_load), Mb(r.resident_after_prefill));
    s += buf;
  }
  if (!r.llamacpp) return s;
  const LlamaCppPrefill& l = *r.llamacpp;
  std::snprintf(buf, sizeof buf, "beside %s (%d threads, batches of %d) on the same file:\n", l.tool.c_str(), l.threads,
                l.batch_size);
  s += buf;
  s += "  tokens  tierkv tok/s  llama.cpp tok/s  tierkv/llama.cpp\n";
  for (const auto& p : r.prefill) {
    const double theirs = LlamaCppTokensPerS(l, p.tokens);
    if (theirs <= 0) continue;
    std::snprintf(buf, sizeof buf, "  %6d %13.0f %16.0f %17.2fx\n", p.tokens, p.tokens_per_s, theirs,
                  p.tokens_per_s / theirs);
    s += buf;
  }
  std::snprintf(buf, sizeof buf,
                "  resident (MB)  before model  after load  after prefill  added by the model\n"
                "  tierkv         %12.1f %11.1f %14.1f %19.1f\n"
                "  llama.cpp      %12.1f %11.1f %14.1f %19.1f  (node's runtime is in 'before model')\n",
                Mb(r.resident_before_load), Mb(r.resident_after_load), Mb(r.resident_after_prefill),
                Mb(r.resident_after_prefill - r.resident_before_load), Mb(l.resident_before_model), Mb(l.resident_after_load),
                Mb(l.resident_after_prefill), Mb(l.resident_after_prefill - l.resident_before_model));
  s += buf;
  return s;
}

std::string LlamaCppJson(const EngineBenchReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, ", \"resident_bytes\": {\"before_load\": %llu, \"after_load\": %llu, \"after_prefill\": %llu}",
                static_cast<unsigned long long>(r.resident_before_load),
                static_cast<unsigned long long>(r.resident_after_load), static_cast<unsigned long long>(r.resident_after_prefill));
  std::string s = buf;
  if (!r.llamacpp) return s;
  const LlamaCppPrefill& l = *r.llamacpp;
  std::snprintf(buf, sizeof buf,
                ", \"llamacpp\": {\"threads\": %d, \"batch_size\": %d, \"resident_bytes\": {\"before_model\": %llu, "
                "\"after_load\": %llu, \"after_context\": %llu, \"after_prefill\": %llu}, \"prefill\": [",
                l.threads, l.batch_size, static_cast<unsigned long long>(l.resident_before_model),
                static_cast<unsigned long long>(l.resident_after_load),
                static_cast<unsigned long long>(l.resident_after_context),
                static_cast<unsigned long long>(l.resident_after_prefill));
  s += buf;
  bool first = true;
  for (const auto& p : r.prefill) {
    const double theirs = LlamaCppTokensPerS(l, p.tokens);
    if (theirs <= 0) continue;
    std::snprintf(buf, sizeof buf, "%s{\"tokens\": %d, \"tokens_per_s\": %.1f, \"tierkv_over_llamacpp\": %.4f}",
                  first ? "" : ", ", p.tokens, theirs, p.tokens_per_s / theirs);
    s += buf;
    first = false;
  }
  s += "]}";
  return s;
}

}  // namespace

double SgemmGflops(int n, int repeats) {
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  kernels::MatMulNT(n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  double best = 1e30;
  // Enough calls per timing that small sizes are not dominated by the clock.
  const int inner = std::max(1, static_cast<int>(2e9 / (2.0 * n * n * n)));
  for (int rep = 0; rep < repeats; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) {
      kernels::MatMulNT(n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    }
    best = std::min(best, SecondsSince(t0) / inner);
  }
  return 2.0 * n * n * n / best / 1e9;
}

double PrefillMatmulFlops(const ModelConfig& c, int T) {
  const double dim = c.dim, kvd = c.kv_dim(), hid = c.hidden_dim, hd = c.head_dim();
  const double t = T;
  double per_layer = 2 * t * dim * (dim + 2 * kvd)  // q, k, v
                     + 2 * t * dim * dim            // output projection
                     + 2 * t * dim * 2 * hid        // gate and up
                     + 2 * t * hid * dim;           // down
  const double causal_pairs = t * (t + 1) / 2;
  per_layer += 2 * 2 * causal_pairs * hd * c.n_heads;  // scores and weighted values
  return per_layer * c.n_layers + 2 * dim * c.vocab_size;
}

Result<EngineBenchReport> RunEngineBench(const Model& model, const std::string& model_name,
                                         const EngineBenchOptions& o) {
  EngineBenchReport r;
  r.model = model_name + " (" + model.config().ToString() + ")";
  r.blas = kernels::BlasName();
  r.blas_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ModelConfig& c = model.config();
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> inputs;
  for (int T : o.batch_sizes) {
    if (T > c.context_length) continue;
    // The ids tools/llamacpp/runner.py prefill uses too.
    std::vector<int32_t> tokens(T);
    for (int i = 0; i < T; ++i) tokens[i] = static_cast<int32_t>((static_cast<int64_t>(i) * 7919) % c.vocab_size);
    PrefillOptions po;
    ASSIGN_OR_RETURN(PrefillResult warm, model.Prefill(tokens, po));
    inputs.push_back(std::move(tokens));
    r.prefill.push_back({});
  }
  // After the warm-up prefills, before the sgemm timings allocate their own matrices.
  r.resident_after_prefill = ReadResidentSize().current;
  r.sgemm.resize(o.sgemm_sizes.size());
  // Rounds alternate the two measurements so that both see the same machine
  // (it is shared and noisy); each keeps its best time over the rounds.
  std::vector<double> best(inputs.size(), 1e30);
  for (int round = 0; round < o.repeats; ++round) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      auto t0 = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(PrefillResult res, model.Prefill(inputs[k], PrefillOptions{}));
      best[k] = std::min(best[k], SecondsSince(t0));
    }
    {
      // The library's peak with all cores on one call, its best case.
      kernels::LibraryThreads all(r.blas_threads);
      for (size_t k = 0; k < o.sgemm_sizes.size(); ++k) {
        r.sgemm[k].n = o.sgemm_sizes[k];
        r.sgemm[k].gflops = std::max(r.sgemm[k].gflops, SgemmGflops(o.sgemm_sizes[k], 1));
      }
    }
    // Let the library's OpenMP workers stop spinning before the next prefill.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const auto& p : r.sgemm) r.peak_gflops = std::max(r.peak_gflops, p.gflops);
  for (const auto& [q, rows] : o.kernel_shapes) {
    for (const bool values : {true, false}) {
      KernelPoint k;
      k.kernel = values ? "attention" : "scoring";
      k.queries = q;
      k.rows = rows;
      const double sec = KernelSeconds(c, q, rows, values, o.repeats);
      const double flops = (values ? 4.0 : 2.0) * q * c.group() * rows * c.head_dim() * c.n_kv_heads;
      k.ms = sec * 1e3;
      k.gflops = flops / sec / 1e9;
      k.fraction_of_peak = r.peak_gflops > 0 ? k.gflops / r.peak_gflops : 0;
      r.kernels.push_back(k);
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    PrefillPoint& p = r.prefill[k];
    const int T = static_cast<int>(inputs[k].size());
    p.tokens = T;
    p.ms = best[k] * 1e3;
    p.tokens_per_s = T / best[k];
    p.gflop = PrefillMatmulFlops(c, T) / 1e9;
    p.gflops = p.gflop / best[k];
    p.fraction_of_peak = r.peak_gflops > 0 ? p.gflops / r.peak_gflops : 0;
  }
  return r;
}

Result<LlamaCppPrefill> ReadLlamaCppPrefill(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(FileSystem::Default(), path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  auto bad = [&](const std::string& field) {
    return Status::InvalidArgument(path + ": field '" + field + "' is missing or not a number (tools/llamacpp/runner.py prefill's output?)");
  };
  auto number = [&](const nlohmann::json& o, const std::string& key, const std::string& field, auto* out) -> Status {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return bad(field);
    *out = o[key].get<std::remove_pointer_t<decltype(out)>>();
    return Status::Ok();
  };
  LlamaCppPrefill r;
  r.tool = j.value("tool", "llama.cpp");
  RETURN_IF_ERROR(number(j, "threads", "threads", &r.threads));
  RETURN_IF_ERROR(number(j, "batch_size", "batch_size", &r.batch_size));
  if (!j.contains("prefill") || !j["prefill"].is_array() || j["prefill"].empty()) return bad("prefill");
  for (size_t i = 0; i < j["prefill"].size(); ++i) {
    const auto& e = j["prefill"][i];
    const std::string at = "prefill[" + std::to_string(i) + "].";
    PrefillPoint p;
    RETURN_IF_ERROR(number(e, "tokens", at + "tokens", &p.tokens));
    RETURN_IF_ERROR(number(e, "ms", at + "ms", &p.ms));
    RETURN_IF_ERROR(number(e, "tokens_per_s", at + "tokens_per_s", &p.tokens_per_s));
    r.prefill.push_back(p);
  }
  const nlohmann::json rb = j.value("resident_bytes", nlohmann::json());
  RETURN_IF_ERROR(number(rb, "before_model", "resident_bytes.before_model", &r.resident_before_model));
  RETURN_IF_ERROR(number(rb, "after_load", "resident_bytes.after_load", &r.resident_after_load));
  RETURN_IF_ERROR(number(rb, "after_context", "resident_bytes.after_context", &r.resident_after_context));
  RETURN_IF_ERROR(number(rb, "after_prefill", "resident_bytes.after_prefill", &r.resident_after_prefill));
  return r;
}

std::string ReportToText(const EngineBenchReport& r) {
  std::string s;
  char buf[256];
  s += "model: " + r.model + "\n";
  std::snprintf(buf, sizeof buf, "BLAS: %s, %d threads\n", r.blas.c_str(), r.blas_threads);
  s += buf;
  s += "sgemm (square, C = A*B^T):\n";
  for (const auto& p : r.sgemm) {
    std::snprintf(buf, sizeof buf, "  n=%-5d %8.1f GFLOP/s\n", p.n, p.gflops);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "peak: %.1f GFLOP/s\n", r.peak_gflops);
  s += buf;
  s += "prefill:\n  tokens        ms   tokens/s  GFLOP  GFLOP/s  of peak\n";
  for (const auto& p : r.prefill) {
    std::snprintf(buf, sizeof buf, "  %6d %9.2f %10.0f %6.2f %8.1f %7.0f%%\n", p.tokens, p.ms,
                  p.tokens_per_s, p.gflop, p.gflops, 100 * p.fraction_of_peak);
    s += buf;
  }
  s += LlamaCppText(r);
  s += "side kernels (one layer, every KV head, fp16 prefix rows):\n"
       "  kernel      queries  rows       ms  GFLOP/s  of peak\n";
  for (const auto& k : r.kernels) {
    std::snprintf(buf, sizeof buf, "  %-10s %7d %5d %8.3f %8.1f %7.1f%%\n", k.kernel.c_str(), k.queries,
                  k.rows, k.ms, k.gflops, 100 * k.fraction_of_peak);
    s += buf;
  }
  return s;
}

std::string ReportToJson(const EngineBenchReport& r) {
  std::string s = "{";
  char buf[256];
  auto esc = [](const std::string& x) {
    std::string o;
    for (char ch : x) {
      if (ch == '"' || ch == '\\') o += '\\';
      o += ch;
    }
    return o;
  };
  s += "\"model\": \"" + esc(r.model) + "\", \"blas\": \"" + esc(r.blas) + "\", ";
  std::snprintf(buf, sizeof buf, "\"blas_threads\": %d, \"peak_gflops\": %.2f, \"sgemm\": [",
                r.blas_threads, r.peak_gflops);
  s += buf;
  for (size_t i = 0; i < r.sgemm.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s{\"n\": %d, \"gflops\": %.2f}", i ? ", " : "", r.sgemm[i].n,
                  r.sgemm[i].gflops);
    s += buf;
  }
  s += "], \"prefill\": [";
  for (size_t i = 0; i < r.prefill.size(); ++i) {
    const auto& p = r.prefill[i];
    std::snprintf(buf, sizeof buf,
                  "%s{\"tokens\": %d, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflop\": %.4f, "
                  "\"gflops\": %.2f, \"fraction_of_peak\": %.4f}",
                  i ? ", " : "", p.tokens, p.ms, p.tokens_per_s, p.gflop, p.gflops,
                  p.fraction_of_peak);
    s += buf;
  }
  s += "], \"kernels\": [";
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    const auto& k = r.kernels[i];
    std::snprintf(buf, sizeof buf,
                  "%s{\"kernel\": \"%s\", \"queries\": %d, \"rows\": %d, \"ms\": %.4f, \"gflops\": %.2f, "
                  "\"fraction_of_peak\": %.4f}",
                  i ? ", " : "", k.kernel.c_str(), k.queries, k.rows, k.ms, k.gflops, k.fraction_of_peak);
    s += buf;
  }
  s += "]";
  s += LlamaCppJson(r);
  s += "}";
  return s;
}

}  // namespace tierkv::bench
