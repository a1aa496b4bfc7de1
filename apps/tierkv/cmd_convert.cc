#include <cstdio>

#include "commands.h"
#include "tierkv/convert.h"

namespace tierkv::app {

void AddConvert(CLI::App& app, Action* run) {
  auto o = std::make_shared<ConvertOptions>();
  auto dtype = std::make_shared<std::string>("f16");
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a llama2.c checkpoint and its tokenizer to one GGUF file");
  sub->add_option("--input", o->input, "llama2.c checkpoint (.bin)")->required();
  sub->add_option("--tokenizer", o->tokenizer,
                  "SentencePiece .model or llama2.c tokenizer.bin to embed");
  sub->add_option("--output", o->output, "GGUF file to write")->required();
  sub->add_option("--dtype", *dtype, "Type of the weight matrices")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
  sub->add_option("--name", o->name, "general.name of the model");
  sub->callback([o, dtype, run] {
    *run = [o, dtype]() -> int {
      o->f16 = *dtype == "f16";
      Status s = ConvertLlama2cToGguf(*o);
      if (!s.ok()) return Fail(s.ToString());
      std::printf("wrote %s\n", o->output.c_str());
      return 0;
    };
  });
}

}  // namespace tierkv::app
