#include "engine/head_scores.h"

#include "kernels/attention.h"
#include "select/importance.h"
#include "util/thread_pool.h"

namespace tierkv::engine {
namespace {

std::vector<float> Score(const LayerView& view, const ModelConfig& c, int head,
                         const uint16_t* keys, size_t stride, size_t rows,
                         kernels::AttentionScratch* scratch) {
  const int hd = c.head_dim(), group = c.group();
  std::vector<float> colsum(static_cast<size_t>(group) * rows, 0.0f);
  kernels::AttentionArgs a;
  a.n_new = view.n_new;
  a.head_dim = hd;
  a.group = group;
  a.q = view.q + static_cast<size_t>(head) * group * hd;
  a.q_stride = view.q_stride;
  a.k_new = view.k + static_cast<size_t>(head) * hd;
  a.v_new = view.v + static_cast<size_t>(head) * hd;
  a.kv_new_stride = view.kv_stride;
  // Only the weights: no output, no values read.
  a.prefix = KvRows{keys, keys, KvDType::kF16, rows, stride, stride, nullptr};
  a.out = nullptr;
  a.colsum = colsum.data();
  kernels::AttendKvGroup(a, scratch);
  std::vector<float> score(rows, 0.0f);
  for (int g = 0; g < group; ++g) {
    for (size_t j = 0; j < rows; ++j) score[j] += colsum[g * rows + j];
  }
  return score;
}

}  // namespace

std::vector<std::vector<float>> AllHeadScores(const LayerView& view, const ModelConfig& c, int n,
                                              const uint16_t* keys, size_t stride, size_t rows) {
  std::vector<std::vector<float>> out(n);
  ThreadPool::Compute()->ParallelFor(n, [&](int h) {
    thread_local kernels::AttentionScratch scratch;
    out[h] = Score(view, c, h, keys + static_cast<size_t>(h) * c.head_dim(), stride, rows, &scratch);
  });
  return out;
}

std::vector<float> SumScores(const std::vector<std::vector<float>>& scores, size_t rows) {
  std::vector<float> summed(rows, 0.0f);
  for (const auto& sc : scores) {
    for (size_t j = 0; j < rows; ++j) summed[j] += sc[j];
  }
  return summed;
}

void ForSelection(const EngineOptions& options, std::vector<std::vector<float>>* scores) {
  for (auto& head : *scores) {
    const ScorePool& p = options.score_pool;
    if (p.before > 0 || p.after > 0) head = select::MaxPoolWindow(head, p.before, p.after);
    if (options.select_lowest) {
      for (float& x : head) x = -x;
    }
  }
}

}  // namespace tierkv::engine
