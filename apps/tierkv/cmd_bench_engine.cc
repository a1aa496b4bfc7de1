#include <cstdio>

#include "commands.h"
#include "tierkv/tools/crossover_calibration.h"
#include "tierkv/tools/decode_bench.h"
#include "tierkv/tools/engine_bench.h"
#include "tierkv/process.h"

namespace tierkv::app {

void AddBenchEngine(CLI::App& app, Action* run) {
  struct Args {
    std::string model;
    std::string shape = "default";
    std::vector<int> tokens = {64, 256, 512, 1024, 2048};
    int repeats = 5;
    bool json = false;
    std::string llamacpp;
    WeightFlags weights;
    bool decode = false;
    bool no_products = false;
    bench::DecodeBenchOptions d;
    std::string calibrate;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "bench-engine",
      "Prefill throughput and GFLOP/s of the model's matrix work next to the BLAS sgemm peak "
      "measured in the same run, the side kernels' (attention over stored rows, scoring) share of "
      "that peak, and the resident size before and after loading; with --llamacpp, llama.cpp's "
      "prefill and resident size beside ours; with --decode, decode and short batches instead");
  sub->add_option("--model", a->model,
                  "Model file or a pulled model's name; without it, random weights of --shape are used");
  sub->add_option("--shape", a->shape,
                  "Random-weight shape when no --model: 'default' (dim 256, 8 layers, 16 MHA "
                  "heads, vocab 4096: the default model's shape) or 'large' (dim 1024, 16 heads)")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "large"}));
  sub->add_option("--tokens", a->tokens, "Prefill batch sizes")->capture_default_str();
  sub->add_option("--repeats", a->repeats, "Rounds; each alternates prefill and sgemm-peak timings and the best of each is kept")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", a->json, "Print JSON instead of a table");
  CLI::Option* decode = sub->add_flag("--decode", a->decode,
                "Decode instead of prefill: tokens/s of one sequence after a --prompt-tokens prompt and of "
                "--decode-batch sequences stepped together, next to the floor the measured read bandwidth sets "
                "(weight bytes per pass / GB/s); then the products of an 8192 x 8192 matrix per --product-types "
                "at --product-rows rows, in the weights' type and by dequantize-then-sgemm (docs/engine.md)");
  sub->add_option("--prompt-tokens", a->d.prompt_tokens, "--decode: the prompt each sequence decodes after")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--decode-tokens", a->d.decode_tokens, "--decode: steps timed per round")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--decode-batch", a->d.batches, "--decode: sequences stepped together, one measurement each")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  CLI::Option* rows = sub->add_option("--product-rows", a->d.product_rows, "--decode, --calibrate: activation rows M of the product table")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  CLI::Option* types = sub->add_option("--product-types", a->d.product_types,
                  "--decode, --calibrate: weight types of the product table (those with in-type kernels)")
      ->capture_default_str()
      ->check(CLI::IsMember({"Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16"}));
  sub->add_flag("--no-products", a->no_products,
                "--decode: decode figures only, without the product table (tools/dev/bench_native.sh times decode so)")
      ->needs(decode)
      ->excludes(rows)
      ->excludes(types);
  AddWeightsFlag(sub, &a->weights);
  sub->add_option("--calibrate", a->calibrate,
                  "Instead of the benchmark: find on this machine, per --product-types, the most activation rows "
                  "at which a product in the weights' type is still no slower than dequantize-then-sgemm (8192 x "
                  "8192, the rows tried are --product-rows when given, else 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, "
                  "128, 192, 256, 384, 512, up to where sgemm wins twice in a row; each point timed --repeats + 2 "
                  "times per path, medians; 1-2 minutes at --repeats 3), print them and save them to FILE for "
                  "--crossover. Types packed for AVX-512 VNNI (Q4_K, Q8_0 there) are in type at every length and "
                  "skipped. Needs no --model")
      ->type_name("FILE")
      ->check(NonEmpty());
  sub->add_option("--llamacpp", a->llamacpp,
                  "llama.cpp's prefill on the same --model (tools/llamacpp/llamacpp python-native tools/llamacpp/runner.py prefill --model M --out "
                  "R.json, run just before): its tokens/s and resident size beside ours, with the ratio");
  sub->callback([a, run, sub] {
    const bool rows_given = sub->count("--product-rows") > 0;
    *run = [a, rows_given]() -> int {
      if (!a->calibrate.empty()) {
        if (Status s = bench::CheckCrossoverPath(a->calibrate); !s.ok()) return Fail(s.ToString());
        bench::CalibrateOptions o;
        o.types = a->d.product_types;
        if (rows_given) o.rows = a->d.product_rows;
        o.repeats = a->repeats;
        o.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
        auto r = bench::CalibrateCrossover(o);
        if (!r.ok()) return Fail(r.status().ToString());
        // Printed first: the timings are not lost if the file cannot be saved.
        std::printf("%s", a->json ? (bench::CalibrateReportToJson(*r) + "\n").c_str()
                                  : bench::CalibrateReportToText(*r).c_str());
        std::fflush(stdout);
        if (Status saved = bench::SaveCrossover(*r, a->calibrate); !saved.ok()) return Fail(saved.ToString());
        std::fprintf(stderr, "saved to %s: products follow it with --crossover %s\n", a->calibrate.c_str(),
                     a->calibrate.c_str());
        return 0;
      }
      std::unique_ptr<Model> model;
      std::string name;
      std::optional<bench::LlamaCppPrefill> llamacpp;
      if (!a->llamacpp.empty()) {
        if (a->model.empty()) return Fail("--llamacpp compares on a model file: give --model too");
        if (a->decode) return Fail("--llamacpp compares prefill; --decode has no llama.cpp figures (run llama-bench, docs/engine.md)");
        auto l = bench::ReadLlamaCppPrefill(a->llamacpp);
        if (!l.ok()) return Fail(l.status().ToString());
        llamacpp = std::move(*l);
      }
      const ResidentSize before = ReadResidentSize();
      if (!a->model.empty()) {
        auto m = LoadModel(a->model, a->weights);
        if (!m.ok()) return Fail(m.status().ToString());
        model = std::move(*m);
        name = a->model;
      } else {
        if (Status s = ApplyCrossoverFlag(a->weights); !s.ok()) return Fail(s.ToString());
        ModelConfig c;
        c.dim = a->shape == "large" ? 1024 : 256;
        c.hidden_dim = a->shape == "large" ? 2816 : 768;
        c.n_layers = 8;
        c.n_heads = 16;
        c.n_kv_heads = 16;
        c.vocab_size = 4096;
        c.context_length = 4096;
        auto m = Model::Random(c, 1);
        if (!m.ok()) return Fail(m.status().ToString());
        model = std::move(*m);
        name = "random-" + a->shape;
      }
      if (a->decode) {
        a->d.repeats = a->repeats;
        if (a->no_products) a->d.product_types.clear();
        auto d = bench::RunDecodeBench(*model, name, a->d);
        if (!d.ok()) return Fail(d.status().ToString());
        std::printf("%s\n", a->json ? bench::DecodeReportToJson(*d).c_str() : bench::DecodeReportToText(*d).c_str());
        return 0;
      }
      bench::EngineBenchOptions o;
      o.batch_sizes = a->tokens;
      o.repeats = a->repeats;
      const ResidentSize loaded = ReadResidentSize();
      auto r = bench::RunEngineBench(*model, name, o);
      if (!r.ok()) return Fail(r.status().ToString());
      r->resident_before_load = before.current;
      r->resident_after_load = loaded.current;
      r->llamacpp = std::move(llamacpp);
      std::printf("%s\n", a->json ? bench::ReportToJson(*r).c_str() : bench::ReportToText(*r).c_str());
      return 0;
    };
  });
}

}  // namespace tierkv::app
