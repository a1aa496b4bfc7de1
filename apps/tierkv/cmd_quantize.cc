// tierkv quantize: a GGUF model with its weight matrices in another type.
#include <cstdio>

#include "commands.h"
#include "tierkv/model_packages.h"
#include "tierkv/convert.h"

namespace tierkv::app {

void AddQuantize(CLI::App& app, Action* run) {
  struct Args {
    std::string model, type, output;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "Rewrite a GGUF model with its weight matrices in another tensor type (round to nearest per block, as the "
      "GGUF specification lays blocks out; norms stay F32, metadata and tokenizer are copied)");
  sub->add_option("--model", a->model, "GGUF model to read, or a pulled model's name (tierkv pull)")->required();
  sub->add_option("--type", a->type, "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K")
      ->required();
  sub->add_option("--output", a->output, "GGUF file to write (atomically)")->required();
  sub->callback([a, run] {
    *run = [a]() -> int {
      auto model = ResolveModelFlag(a->model);
      if (!model.ok()) return Fail(model.status().ToString());
      Status s = QuantizeGguf(*model, a->output, a->type);
      if (!s.ok()) return Fail(s.ToString());
      std::printf("wrote %s\n", a->output.c_str());
      return 0;
    };
  });
}

}  // namespace tierkv::app
