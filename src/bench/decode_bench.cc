#include "tierkv/tools/decode_bench.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <cstring>

#include <nlohmann/json.hpp>

#include "bench/product_timing.h"
#include "bench/sgemm_peak.h"
#include "kernels/matmul.h"
#include "model/dequant_avx2.h"
#include "model/quant.h"
#include "model/quant_dot.h"
#include "model/weight_matrix.h"
#include "tierkv/elapsed.h"
#include "tierkv/sequence.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace tierkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return out[0] + out[1] + out[2] + out[3];
}

uint64_t SumBytes(const uint8_t* p, size_t n) {
  if (model::HasAvx2()) return SumAvx2(p, n);
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

// Read bandwidth of the compute threads together over 512 MiB (far past any
// cache), best of `repeats`, from the kind of memory a mapped model's rows
// are in: huge pages where the kernel has them, else 4 KiB pages as the
// heap's (model::MoveRowsToHugePages). 0 if the memory cannot be had.
double ReadGbps(int repeats) {
  const size_t bytes = size_t{512} << 20;
  auto huge = HugePageBuffer::Allocate(bytes);
  if (!huge.ok()) return 0;
  uint8_t* buf = (*huge)->data();
  std::memset(buf, 1, bytes);  // not zeros: a sum of 0 reads as a failed measurement
  ThreadPool* pool = ThreadPool::Compute();
  const int parts = (pool->workers() + 1) * 8;
  const size_t per = bytes / parts;
  std::atomic<uint64_t> sink{0};
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round faults the pages in
    const auto t0 = Clock::now();
    pool->ParallelFor(parts, [&](int p) { sink += SumBytes(buf + p * per, per); });
    if (r > 0) best = std::min(best, SecondsSince(t0));
  }
  return sink.load() == 0 ? 0 : bytes / best / 1e9;
}

// Decode of `batch` sequences stepped together after a P-token prompt each:
// tokens/s over `steps` passes, greedy (argmax) continuation.
Result<double> DecodeSeconds(const Model& model, int batch, int prompt, int steps) {
  const ModelConfig& c = model.config();
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> ptrs;
  std::vector<int32_t> next(batch);
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(std::make_unique<Sequence>(c, 0, KvDType::kF32));
    seqs.back()->Reserve(static_cast<size_t>(prompt + steps + 1));
    std::vector<int32_t> tokens(prompt);
    for (int i = 0; i < prompt; ++i) tokens[i] = static_cast<int32_t>((int64_t{i} * 7919 + b * 104729) % c.vocab_size);
    ASSIGN_OR_RETURN(std::vector<float> logits, seqs.back()->Step(model, tokens));
    next[b] = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ptrs.push_back(seqs.back().get());
  }
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    ASSIGN_OR_RETURN(auto all, Sequence::StepBatch(model, ptrs, next));
    for (int b = 0; b < batch; ++b) {
      next[b] = static_cast<int32_t>(std::max_element(all[b].begin(), all[b].end()) - all[b].begin());
    }
  }
  return SecondsSince(t0);
}

Status RunProducts(const DecodeBenchOptions& o, DecodeBenchReport* r) {
  if (o.product_types.empty()) return Status::Ok();
  r->product_n = kProductN;
  r->product_k = kProductK;
  for (const std::string& name : o.product_types) {
    ASSIGN_OR_RETURN(auto m, MakeProductMatrix(name));
    for (int M : o.product_rows) r->products.push_back(MeasureProduct(*m, M, o.repeats));
  }
  return Status::Ok();
}

}  // namespace

Result<DecodeBenchReport> RunDecodeBench(const Model& model, const std::string& model_name,
                                         const DecodeBenchOptions& o) {
  const ModelConfig& c = model.config();
  if (o.prompt_tokens < 1 || o.decode_tokens < 1 || o.prompt_tokens + o.decode_tokens >= c.context_length) {
    return Status::InvalidArgument("decode bench: prompt_tokens + decode_tokens must be within the model's context of " +
                                   std::to_string(c.context_length));
  }
  DecodeBenchReport r;
  r.model = model_name + " (" + c.ToString() + ")";
  r.kernels = model::DotKernelName();
  r.threads = ThreadPool::Compute()->workers() + 1;
  r.prompt_tokens = o.prompt_tokens;
  r.weight_bytes = static_cast<double>(model.weight_bytes());
  r.read_gbps = ReadGbps(o.repeats);
  r.floor_tokens_per_s = r.weight_bytes > 0 ? r.read_gbps * 1e9 / r.weight_bytes : 0;
  {
    kernels::LibraryThreads all(r.threads);
    r.peak_gflops = SgemmGflops(1024, 4);
  }
  for (int batch : o.batches) {
    if (batch < 1) return Status::InvalidArgument("decode bench: a batch of " + std::to_string(batch));
    std::vector<double> t;
    for (int round = 0; round < o.repeats; ++round) {
      ASSIGN_OR_RETURN(double s, DecodeSeconds(model, batch, o.prompt_tokens, o.decode_tokens));
      t.push_back(s);
    }
    const double s = Median(t);
    r.decode.push_back({batch, batch * o.decode_tokens / s, s / o.decode_tokens * 1e3});
  }
  RETURN_IF_ERROR(RunProducts(o, &r));
  return r;
}

std::string DecodeReportToText(const DecodeBenchReport& r) {
  std::string s;
  char buf[320];
  s += "model: " + r.model + "\n";
  std::snprintf(buf, sizeof buf,
                "in-type kernels: %s, %d threads\n"
                "weights read per pass: %.1f MB; read bandwidth %.1f GB/s -> floor %.1f tokens/s; sgemm peak %.1f GFLOP/s\n",
                r.kernels.c_str(), r.threads, r.weight_bytes / 1e6, r.read_gbps,
                r.floor_tokens_per_s, r.peak_gflops);
  s += buf;
  std::snprintf(buf, sizeof buf, "decode after a %d-token prompt (median of rounds):\n  batch   tokens/s   ms/step  of floor\n",
                r.prompt_tokens);
  s += buf;
  for (const DecodePoint& d : r.decode) {
    std::snprintf(buf, sizeof buf, "  %5d %10.1f %9.2f %8.0f%%\n", d.batch, d.tokens_per_s, d.ms_per_step,
                  r.floor_tokens_per_s > 0 ? 100 * d.tokens_per_s / d.batch / r.floor_tokens_per_s : 0);
    s += buf;
  }
  if (r.products.empty()) return s;
  std::snprintf(buf, sizeof buf,
                "products %d x %d (median ms; GB/s of weights; GFLOP/s): in type | dequantize + sgemm\n"
                "  type     M   in-type ms    GB/s  GFLOP/s | sgemm ms    GB/s  GFLOP/s   faster   MatMul takes\n",
                r.product_n, r.product_k);
  s += buf;
  for (const ProductPoint& p : r.products) {
    std::snprintf(buf, sizeof buf, "  %-5s %4d %11.2f %7.1f %8.1f | %8.2f %7.1f %8.1f   %-7s  %s\n", p.type.c_str(),
                  p.rows, p.in_type_ms, p.in_type_gbps, p.in_type_gflops, p.dequantize_ms, p.dequantize_gbps,
                  p.dequantize_gflops, p.in_type_wins() ? "in type" : "sgemm",
                  p.rows <= p.in_type_max_rows ? "in type" : "sgemm");
    s += buf;
  }
  return s;
}

std::string DecodeReportToJson(const DecodeBenchReport& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["kernels"] = r.kernels;
  j["threads"] = r.threads;
  j["prompt_tokens"] = r.prompt_tokens;
  j["weight_bytes"] = r.weight_bytes;
  j["read_gbps"] = r.read_gbps;
  j["floor_tokens_per_s"] = r.floor_tokens_per_s;
  j["peak_gflops"] = r.peak_gflops;
  for (const DecodePoint& d : r.decode) {
    j["decode"].push_back({{"batch", d.batch}, {"tokens_per_s", d.tokens_per_s}, {"ms_per_step", d.ms_per_step}});
  }
  if (!r.products.empty()) {
    j["product_n"] = r.product_n;
    j["product_k"] = r.product_k;
  }
  for (const ProductPoint& p : r.products) {
    j["products"].push_back({{"type", p.type}, {"rows", p.rows}, {"in_type_ms", p.in_type_ms},
                             {"dequantize_ms", p.dequantize_ms}, {"in_type_gbps", p.in_type_gbps},
                             {"dequantize_gbps", p.dequantize_gbps}, {"in_type_gflops", p.in_type_gflops},
                             {"dequantize_gflops", p.dequantize_gflops},
                             {"in_type_max_rows", p.in_type_max_rows}});
  }
  return j.dump(2);
}

}  // namespace tierkv::bench
