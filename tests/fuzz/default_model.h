// The fuzz targets that tokenize load the shipped default model and its
// embedded tokenizer once, in LLVMFuzzerInitialize; a failure traps (the
// target cannot run without them).
#pragma once

#include <memory>

#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace tierkv::fuzz {

struct DefaultModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

inline DefaultModel LoadDefaultModel() {
  auto m = Model::Load(TIERKV_DEFAULT_MODEL);
  if (!m.ok()) __builtin_trap();
  DefaultModel d;
  d.model = std::move(m).value();
  auto t = LoadTokenizerFor(*d.model, "");
  if (!t.ok()) __builtin_trap();
  d.tokenizer = std::move(t).value();
  return d;
}

}  // namespace tierkv::fuzz
