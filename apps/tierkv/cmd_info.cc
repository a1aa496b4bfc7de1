// tierkv info: what a model file is, as tierkv reads it.
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "engine_flags.h"
#include "tierkv/chat.h"
#include "commands.h"
#include "tierkv/engine.h"
#include "tierkv/hex.h"
#include "tierkv/process.h"

namespace tierkv::app {

namespace {


nlohmann::json Describe(const ModelAndTokenizer& m, const ModelFileInfo& file, uint32_t chunk_tokens,
                        const std::string& tokenizer_flag) {
  const ModelConfig& c = m.model->config();
  nlohmann::json j;
  j["path"] = m.path;
  j["format"] = file.format;
  j["file_bytes"] = file.file_bytes;
  j["architecture"] = c.architecture;
  j["shape"] = {{"dim", c.dim}, {"hidden", c.hidden_dim}, {"layers", c.n_layers}, {"heads", c.n_heads},
                {"kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim()}, {"vocab", c.vocab_size},
                {"context", c.context_length}};
  j["rope"] = {{"theta", c.rope_theta}, {"pairs", c.rope_neox ? "halves (neox)" : "adjacent"}};
  std::map<std::string, std::pair<int, uint64_t>> types;  // type -> tensors, bytes
  for (const ModelFileInfo::Tensor& t : file.tensors) {
    types[t.type].first += 1;
    types[t.type].second += t.bytes;
  }
  for (const auto& [type, n] : types) j["tensor_types"][type] = {{"tensors", n.first}, {"bytes", n.second}};
  const Tokenizer& tok = *m.tokenizer;
  const std::optional<Vocab>& v = m.model->embedded_vocab();
  j["tokenizer"] = {{"source", tokenizer_flag.empty() ? "embedded" : tokenizer_flag},
                    {"tokens", tok.vocab_size()},
                    {"bos", tok.bos_id()},
                    {"eos", tok.eos_id()}};
  if (tokenizer_flag.empty() && v) {
    j["tokenizer"]["kind"] = v->kind == Vocab::Kind::kByteBpe ? "byte-level BPE" : "SentencePiece-style BPE";
    if (!v->pre.empty()) j["tokenizer"]["pre"] = v->pre;
    j["tokenizer"]["adds_bos"] = v->add_bos;
  }
  // What serve's --chat-template auto picks.
  auto chat = ChooseChatTemplate(v, "auto");
  j["chat_template"] = chat.ok() ? nlohmann::json{{"format", ChatFormatName(chat->format)},
                                                  {"in_file", v && !v->chat_template.empty()}}
                                 : nlohmann::json{{"error", chat.status().message()}};
  if (chat.ok() && !chat->default_system.empty()) j["chat_template"]["default_system"] = chat->default_system;
  // fp16 K and V rows of every layer, as the store keeps them.
  j["kv_bytes_per_token"] = 2 * 2 * static_cast<uint64_t>(c.n_layers) * static_cast<uint64_t>(c.kv_dim());
  engine::EngineOptions o;
  o.chunk_tokens = chunk_tokens;
  o.tokenizer_hash = TokenizerHash(tokenizer_flag);
  j["fingerprint"] = {{"value", Hex64(engine::StoreFingerprint(*m.model, o))}, {"chunk_tokens", chunk_tokens}};
  const ResidentSize rs = ReadResidentSize();
  j["resident_bytes"] = {{"after_load", rs.current}, {"peak", rs.peak}};
  j["weights"] = {{"storage", WeightStorageName(m.model->weight_storage())}, {"bytes", m.model->weight_bytes()}};
  return j;
}

void PrintText(const nlohmann::json& j) {
  auto mb = [](const nlohmann::json& bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes.get<uint64_t>()) / 1e6);
    return std::string(buf);
  };
  std::printf("model         %s (%s, %s MB)\n", j["path"].get<std::string>().c_str(),
              j["format"].get<std::string>().c_str(), mb(j["file_bytes"]).c_str());
  const auto& s = j["shape"];
  std::printf("architecture  %s: dim %d, hidden %d, %d layers, %d heads (%d KV, head size %d), vocab %d, context %d\n",
              j["architecture"].get<std::string>().c_str(), s["dim"].get<int>(), s["hidden"].get<int>(),
              s["layers"].get<int>(), s["heads"].get<int>(), s["kv_heads"].get<int>(), s["head_dim"].get<int>(),
              s["vocab"].get<int>(), s["context"].get<int>());
  std::printf("rope          base %g, pairs %s\n", j["rope"]["theta"].get<double>(),
              j["rope"]["pairs"].get<std::string>().c_str());
  if (j.contains("tensor_types")) {
    std::printf("tensors      ");
    for (const auto& [type, n] : j["tensor_types"].items()) {
      std::printf(" %s x%d (%s MB)", type.c_str(), n["tensors"].get<int>(), mb(n["bytes"]).c_str());
    }
    std::printf("\n");
  }
  const auto& t = j["tokenizer"];
  std::printf("tokenizer     %s, %d tokens, BOS %d, EOS %d%s%s\n", t.value("kind", t["source"].get<std::string>()).c_str(),
              t["tokens"].get<int>(), t["bos"].get<int>(), t["eos"].get<int>(),
              t.contains("pre") ? (", pre-tokenizer " + t["pre"].get<std::string>()).c_str() : "",
              t.contains("adds_bos") ? (t["adds_bos"].get<bool>() ? ", adds BOS" : ", no BOS") : "");
  const auto& ct = j["chat_template"];
  if (ct.contains("error")) {
    std::printf("chat          %s\n", ct["error"].get<std::string>().c_str());
  } else {
    std::printf("chat          %s (%s)\n", ct["format"].get<std::string>().c_str(),
                ct["in_file"].get<bool>() ? "recognised from tokenizer.chat_template" : "the file has no template");
  }
  std::printf("KV per token  %llu bytes (fp16 K and V of every layer)\n",
              static_cast<unsigned long long>(j["kv_bytes_per_token"].get<uint64_t>()));
  std::printf("fingerprint   %s (chunks of %d tokens)\n", j["fingerprint"]["value"].get<std::string>().c_str(),
              j["fingerprint"]["chunk_tokens"].get<int>());
  const bool mapped = j["weights"]["storage"] == "mapped";
  std::printf("weights       %s MB %s\n", mb(j["weights"]["bytes"]).c_str(),
              mapped ? "in their file types, from the mapped file, copied into huge pages where the kernel has them (--weights mapped)"
                     : "in fp32, dequantized at load (--weights fp32)");
  std::printf("resident      %s MB after load (peak %s MB)\n", mb(j["resident_bytes"]["after_load"]).c_str(),
              mb(j["resident_bytes"]["peak"]).c_str());
}

}  // namespace

void AddInfo(CLI::App& app, Action* run) {
  struct Args {
    std::string model, tokenizer;
    WeightFlags weights;
    uint32_t chunk_tokens = engine::EngineOptions{}.chunk_tokens;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "info", "What a model file is as tierkv reads it: architecture, shapes, tensor types, tokenizer, KV bytes per "
              "token, the store fingerprint, and the resident size once loaded");
  sub->add_option("--model", a->model, "GGUF or llama2.c model, or a pulled model's name (default: the project's own)");
  sub->add_option("--tokenizer", a->tokenizer, "Tokenizer (default: the model's own)");
  AddWeightsFlag(sub, &a->weights);
  sub->add_option("--chunk-tokens", a->chunk_tokens, "Chunk size the fingerprint is for")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_flag("--json", a->json, "JSON instead of text");
  sub->callback([a, run] {
    *run = [a]() -> int {
      // The file's tensors first: its bytes are freed before the model loads,
      // so the peak below is the model's.
      auto path = ModelPathOrDefault(a->model);
      if (!path.ok()) return Fail(path.status().ToString());
      auto file = DescribeModelFile(*path);
      if (!file.ok()) return Fail(file.status().ToString());
      auto loaded = LoadModelAndTokenizer(*path, a->tokenizer, a->weights);
      if (!loaded.ok()) return Fail(loaded.status().ToString());
      const nlohmann::json j = Describe(*loaded, *file, a->chunk_tokens, a->tokenizer);
      if (a->json) {
        std::printf("%s\n", j.dump(1).c_str());
      } else {
        PrintText(j);
      }
      return 0;
    };
  });
}

}  // namespace tierkv::app
