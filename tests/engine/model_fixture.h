// A test suite over the project's default model, with a corpus of its own
// tokens (the model card) to build prompts from.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tierkv/model.h"
#include "tierkv/tokenizer.h"

namespace tierkv::engine {

class DefaultModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(TIERKV_DEFAULT_MODEL);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    auto tok = LoadTokenizerFor(*model_, "");
    ASSERT_TRUE(tok.ok());
    std::string path = TIERKV_DEFAULT_MODEL;
    path = path.substr(0, path.rfind('/')) + "/README.md";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto ids = (*tok)->Encode(text.str(), true);
    ASSERT_TRUE(ids.ok());
    corpus_ = new std::vector<int32_t>(std::move(ids).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete corpus_;
    model_ = nullptr;
    corpus_ = nullptr;
  }

  // prefix tokens of the corpus, then `query` tokens from offset `q_from`.
  static std::vector<int32_t> Prompt(size_t prefix, size_t q_from, size_t query) {
    std::vector<int32_t> t(corpus_->begin(), corpus_->begin() + prefix);
    t.insert(t.end(), corpus_->begin() + q_from, corpus_->begin() + q_from + query);
    return t;
  }

  static inline Model* model_ = nullptr;
  static inline std::vector<int32_t>* corpus_ = nullptr;
};

}  // namespace tierkv::engine
