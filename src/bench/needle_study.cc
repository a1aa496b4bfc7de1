// Where a needle is lost (tierkv/tools/needle_study.h).
#include "tierkv/tools/needle_study.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "bench/query_importance.h"
#include "bench/report_format.h"
#include "select/importance.h"

namespace tierkv::bench {

namespace {

// The prefix positions of every expected string's tokens (as encoded alone
// or after a space); empty when one is absent or occurs more than once.
std::vector<int32_t> NeedlePositions(const Tokenizer& tok, const TaskRequest& r) {
  std::set<int32_t> out;
  for (const std::string& a : r.answers) {
    bool found = false;
    for (const std::string& form : {a, " " + a}) {
      auto ids = tok.Encode(form, /*add_bos=*/false);
      if (!ids.ok() || ids->empty()) continue;
      auto it = std::search(r.prefix.begin(), r.prefix.end(), ids->begin(), ids->end());
      if (it == r.prefix.end()) continue;
      // A needle is in one place: a string the prefix holds more than once
      // (common words, a chain's variable names) has no one depth.
      if (std::search(it + 1, r.prefix.end(), ids->begin(), ids->end()) != r.prefix.end()) return {};
      const auto at = static_cast<int32_t>(it - r.prefix.begin());
      for (size_t i = 0; i < ids->size(); ++i) out.insert(at + static_cast<int32_t>(i));
      found = true;
      break;
    }
    if (!found) return {};
  }
  return {out.begin(), out.end()};
}

bool HoldsAll(const std::vector<int32_t>& set, const std::vector<int32_t>& needle) {
  return std::all_of(needle.begin(), needle.end(),
                     [&](int32_t p) { return std::binary_search(set.begin(), set.end(), p); });
}

// The worst needle token's rank in `scores` (0: the top row), over n.
double NeededShare(std::span<const float> scores, const std::vector<int32_t>& needle) {
  float weakest = scores[needle[0]];
  for (int32_t p : needle) weakest = std::min(weakest, scores[p]);
  size_t above = 0;
  for (float s : scores) above += s > weakest;
  return double(above + 1) / double(scores.size());
}

struct Counts {
  std::vector<double> needed;
  std::vector<size_t> shared, blocks, every, some;
};

// One request's layer: what each selection keeps at each retention.
void AddLayer(const std::vector<std::vector<float>>& heads, const std::vector<int32_t>& needle,
              const NeedleStudyOptions& o, Counts* c, std::vector<size_t>* depth_blocks) {
  const size_t n = heads[0].size();
  std::vector<float> sum(n, 0.0f);
  for (const auto& h : heads) {
    for (size_t j = 0; j < n; ++j) sum[j] += h[j];
  }
  std::vector<uint32_t> groups(n);
  for (size_t j = 0; j < n; ++j) groups[j] = static_cast<uint32_t>(j / o.block_tokens);
  c->needed.push_back(NeededShare(sum, needle));
  for (size_t i = 0; i < o.retentions.size(); ++i) {
    const size_t k = select::CountForFraction(n, o.retentions[i]);
    c->shared[i] += HoldsAll(select::TopK(sum, k), needle);
    const bool in_blocks = HoldsAll(select::TopGroups(sum, groups, k), needle);
    c->blocks[i] += in_blocks;
    (*depth_blocks)[i] += in_blocks;
    size_t heads_keeping = 0;
    for (const auto& h : heads) heads_keeping += HoldsAll(select::TopK(h, k), needle);
    c->every[i] += heads_keeping == heads.size();
    c->some[i] += heads_keeping > 0;
  }
}

}  // namespace

Result<NeedleStudy> RunNeedleStudy(const Model& model, const Tokenizer& tok, std::span<const TaskRequest> reqs,
                                   const NeedleStudyOptions& o, const std::function<void(int, int)>& progress) {
  if (o.retentions.empty() || o.block_tokens == 0) return Status::InvalidArgument("needle study: no retentions or blocks");
  const int L = model.config().n_layers;
  const size_t R = o.retentions.size();
  std::vector<Counts> layers(L, Counts{{}, std::vector<size_t>(R), std::vector<size_t>(R), std::vector<size_t>(R),
                                        std::vector<size_t>(R)});
  std::map<std::string, std::pair<size_t, std::vector<size_t>>> depths;  // label -> (layer samples, kept per retention)
  NeedleStudy s;
  s.retentions = o.retentions;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const TaskRequest& r = reqs[i];
    if (r.answers.empty()) continue;
    ++s.requests;
    const std::vector<int32_t> needle = NeedlePositions(tok, r);
    if (!needle.empty()) {
      ++s.located;
      ASSIGN_OR_RETURN(auto imp, QueryImportance(model, r.prefix, r.query));
      auto& d = depths[r.depth >= 0 ? DepthLabel(r.depth) : "none"];
      d.second.resize(R, 0);
      for (int l = 0; l < L; ++l) {
        for (auto& head : imp[l]) head = select::MaxPoolWindow(head, o.score_pool.before, o.score_pool.after);
        AddLayer(imp[l], needle, o, &layers[l], &d.second);
        ++d.first;
      }
    }
    if (progress) progress(static_cast<int>(i + 1), static_cast<int>(reqs.size()));
  }
  if (s.located == 0) return Status::InvalidArgument("needle study: no request's expected strings are in its prefix");
  const double n = s.located;
  for (Counts& c : layers) {
    NeedleLayer out;
    std::sort(c.needed.begin(), c.needed.end());
    out.needed_shared = c.needed[c.needed.size() / 2];
    for (size_t i = 0; i < R; ++i) {
      out.kept_shared.push_back(double(c.shared[i]) / n);
      out.kept_blocks.push_back(double(c.blocks[i]) / n);
      out.kept_every_head.push_back(double(c.every[i]) / n);
      out.kept_some_head.push_back(double(c.some[i]) / n);
    }
    s.layers.push_back(std::move(out));
  }
  for (const auto& [label, d] : depths) {
    std::vector<double> share;
    for (size_t kept : d.second) share.push_back(double(kept) / double(d.first));
    s.by_depth.emplace_back(label, std::move(share));
  }
  return s;
}

std::string NeedleStudyToMarkdown(const NeedleStudy& s) {
  std::ostringstream m;
  const auto pct = [](double x) { return Fmt("%.2f", x); };
  m << s.located << " of " << s.requests << " requests with their needle in the prefix (each expected string once). Per layer: the retention "
    << "the shared set needs to hold every needle token (median), and per retention the share of requests whose "
    << "needle is kept whole by the shared set per token / in blocks / by every head's own set / by at "
    << "least one head's.\n\n| layer | needed |";
  for (double r : s.retentions) m << " @" << pct(r) << " token / block / every head / some head |";
  m << "\n|---:|---:|";
  for (size_t i = 0; i < s.retentions.size(); ++i) m << "---|";
  m << "\n";
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const NeedleLayer& L = s.layers[l];
    m << "| " << l << " | " << pct(L.needed_shared) << " |";
    for (size_t i = 0; i < s.retentions.size(); ++i) {
      m << " " << pct(L.kept_shared[i]) << " / " << pct(L.kept_blocks[i]) << " / " << pct(L.kept_every_head[i])
        << " / " << pct(L.kept_some_head[i]) << " |";
    }
    m << "\n";
  }
  m << "\nBy the needle's depth: the share of (request, layer) pairs whose needle the shared block set keeps.\n\n"
       "| depth |";
  for (double r : s.retentions) m << " @" << pct(r) << " |";
  m << "\n|---|";
  for (size_t i = 0; i < s.retentions.size(); ++i) m << "---:|";
  m << "\n";
  for (const auto& [label, share] : s.by_depth) {
    m << "| " << label << " |";
    for (double x : share) m << " " << pct(x) << " |";
    m << "\n";
  }
  return m.str();
}

}  // namespace tierkv::bench
