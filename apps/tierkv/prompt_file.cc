#include "prompt_file.h"

#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "signals.h"
#include "tierkv/commands.h"

namespace tierkv::app {

std::vector<int32_t> PromptPair::Joined() const {
  std::vector<int32_t> t = prefix;
  t.insert(t.end(), query.begin(), query.end());
  return t;
}

namespace {

// A prompt file is text someone wrote or generated: larger is a mistake
// (or /dev/zero), and would be read into memory whole.
constexpr uintmax_t kMaxPromptFileBytes = 256ull << 20;

}  // namespace

Result<PromptPair> ParsePromptLine(const std::string& line, const std::string& where,
                                   const Tokenizer& tok) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message says what is wrong (syntax, ill-formed UTF-8) and where.
    return Status::InvalidArgument(where + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument(where + ": not a JSON object");
  for (const char* field : {"prefix", "query"}) {
    if (!j.contains(field) || !j[field].is_string() || j[field].get<std::string>().empty()) {
      return Status::InvalidArgument(where + ": field '" + field +
                                     "' is missing or not a non-empty string");
    }
  }
  PromptPair p;
  ASSIGN_OR_RETURN(p.prefix, tok.Encode(j["prefix"].get<std::string>(), /*add_bos=*/true));
  ASSIGN_OR_RETURN(p.query, tok.Encode(j["query"].get<std::string>(), /*add_bos=*/false));
  if (p.query.empty()) return Status::InvalidArgument(where + ": 'query' has no tokens");
  return p;
}

Result<std::vector<PromptPair>> ReadPromptFile(const std::string& path, const Tokenizer& tok) {
  // Checked before opening: opening a FIFO without a writer blocks.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return Status::NotFound("cannot read prompt file " + path);
  if (!std::filesystem::is_regular_file(st)) {
    return Status::InvalidArgument("prompt file " + path +
                                   " is not a regular file (a directory, FIFO or device)");
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxPromptFileBytes) {
    return Status::InvalidArgument("prompt file " + path + " has " + std::to_string(size) +
                                   " bytes, more than the " + std::to_string(kMaxPromptFileBytes) +
                                   " a prompt file may have");
  }
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read prompt file " + path);
  std::vector<PromptPair> out;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ASSIGN_OR_RETURN(PromptPair p, ParsePromptLine(line, path + " line " + std::to_string(no), tok));
    out.push_back(std::move(p));
  }
  if (out.empty()) return Status::InvalidArgument(path + ": no prompts");
  return out;
}

Result<ScratchDir> ScratchDir::Make(const std::string& flag, const std::string& name) {
  if (!flag.empty()) return ScratchDir(flag, false);
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/var/tmp") + "/tierkv-" + name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return Status::IOError("cannot create a directory " + tmpl);
  RegisterScratch(tmpl);  // removed on SIGINT/SIGTERM too
  return ScratchDir(tmpl, true);
}

ScratchDir::~ScratchDir() {
  if (remove_) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    UnregisterScratch(path_);
  }
}

void AddEngineFlags(CLI::App* sub, EngineFlags* f) {
  sub->add_option("--model", f->model,
                  "Model file (default: $TIERKV_MODEL, else " + DefaultModelPath() + ")");
  sub->add_option("--tokenizer", f->tokenizer, "Tokenizer (default: the model's own)");
  sub->add_option("--prompt-file", f->prompt_file, "JSON Lines of {\"prefix\", \"query\"}")
      ->required();
  sub->add_option("--cache-dir", f->cache_dir,
                  "Cache directory (default: a new one under $TMPDIR or /var/tmp, removed after)");
  sub->add_option("--alpha", f->alpha,
                  "Probe threshold exponent: the probe heads decide a layer when their mean "
                  "pairwise Jaccard is at least j^alpha (j: random sets' Jaccard)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 16.0));
  const std::map<std::string, engine::Aggregation> aggregations = {
      {"sum", engine::Aggregation::kSum}, {"vote", engine::Aggregation::kVote}};
  sub->add_option("--aggregation", f->aggregation,
                  "How the probe heads' sets combine: sum (default) or vote")
      ->transform(CLI::CheckedTransformer(aggregations));
  sub->add_option("--chunk-tokens", f->chunk_tokens,
                  "Tokens per chunk (at most what one record's header lists: several hundred for "
                  "small models; a larger value is refused naming this model's limit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--policy", f->policy,
                  "Device/host pool policy: lru, lfu, score or car (default: each system's own: "
                  "lfu for as-h2o-lfu, score for impress and spec, car for car, else lru)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, engine::PoolPolicy>{
          {"lru", engine::PoolPolicy::kLru},
          {"lfu", engine::PoolPolicy::kLfu},
          {"score", engine::PoolPolicy::kScore},
          {"car", engine::PoolPolicy::kCar}}));
  sub->add_option("--maintain-interval-ms", f->maintain_interval_ms,
                  "Run background maintenance (impress, impress-ro, spec: KV reordering) every "
                  "this many ms on its own thread (0: off)")
      ->capture_default_str();
  sub->add_option("--spec-min-recall", f->spec_min_recall,
                  "spec: prefetch a layer's predicted rows only while the prediction's recall "
                  "there (a moving average) is at least this (0: always, as SPEC publishes)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_flag("--exact-store", f->exact_store,
                "Selective systems: store NR's K/V computed again over all of R (after the first "
                "token) instead of over the rows they selected");
}

engine::EngineOptions EngineOptionsFrom(const EngineFlags& f, const std::string& cache_dir,
                                        double retention) {
  engine::EngineOptions o;
  o.chunk_tokens = f.chunk_tokens;
  o.cache_dir = cache_dir;
  o.retention = retention;
  o.alpha = f.alpha;
  o.aggregation = f.aggregation;
  o.policy = f.policy;
  o.maintain_interval_ms = f.maintain_interval_ms;
  o.exact_store = f.exact_store;
  o.spec_min_recall = f.spec_min_recall;
  o.tokenizer_hash = TokenizerHash(f.tokenizer);
  return o;
}

uint64_t TokenizerHash(const std::string& path) {
  if (path.empty()) return 0;
  std::ifstream t(path, std::ios::binary);
  std::stringstream bytes;
  bytes << t.rdbuf();
  const std::string s = bytes.str();
  return XXH3_64bits(s.data(), s.size());
}

}  // namespace tierkv::app
