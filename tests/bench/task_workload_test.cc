// Request files (tierkv/tools/task_workload.h): documents, choices, labels, and
// the errors that name the bad field.
#include "tierkv/tools/task_workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/shared.h"
#include "tierkv/model.h"

namespace tierkv::bench {
namespace {

using ::testing::HasSubstr;

class TaskWorkloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(TIERKV_DEFAULT_MODEL);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
    auto t = LoadTokenizerFor(*model_, "");
    ASSERT_TRUE(t.ok());
    tok_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
  }
  // The message of the error `line` gives after the lines before it.
  static std::string Error(const std::vector<std::string>& lines) {
    TaskWorkloadReader r(*tok_);
    for (size_t i = 0; i < lines.size(); ++i) {
      Status s = r.AddLine(lines[i], "f line " + std::to_string(i + 1));
      if (!s.ok()) return s.message();
    }
    return "";
  }
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(TaskWorkloadTest, ReadsDocumentsChoicesAndLabels) {
  TaskWorkloadReader r(*tok_);
  ASSERT_TRUE(r.AddLine(R"({"document": "d", "text": "A long shared document."})", "l1").ok());
  ASSERT_TRUE(r.AddLine(R"({"id": "a", "task": "t", "prefix_doc": "d", "query": " Q?", "choices": [" yes", " no"], "label": 1})", "l2").ok());
  ASSERT_TRUE(r.AddLine(R"({"prefix": "A long shared document.", "query": " Q?"})", "l3").ok());
  ASSERT_EQ(r.requests().size(), 2u);
  const TaskRequest& a = r.requests()[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.task, "t");
  EXPECT_EQ(a.label, 1);
  ASSERT_EQ(a.choices.size(), 2u);
  EXPECT_EQ(a.choices[0], *tok_->Encode(" yes", false));
  // A document's prefix is what the same text inline gives: BOS first.
  EXPECT_EQ(a.prefix, r.requests()[1].prefix);
  EXPECT_EQ(a.prefix.front(), tok_->bos_id());
  EXPECT_EQ(r.requests()[1].id, "l3");
  EXPECT_EQ(r.requests()[1].label, -1);
  EXPECT_TRUE(r.requests()[1].choices.empty());
}

TEST_F(TaskWorkloadTest, ErrorsNameTheLineAndField) {
  EXPECT_THAT(Error({R"({"query": "q"})"}), HasSubstr("f line 1: field 'prefix' or 'prefix_doc' is required"));
  EXPECT_THAT(Error({R"({"prefix": "p", "prefix_doc": "d", "query": "q"})"}), HasSubstr("exactly one"));
  EXPECT_THAT(Error({R"({"prefix_doc": "d", "query": "q"})"}), HasSubstr("'prefix_doc' names 'd', not a document"));
  EXPECT_THAT(Error({R"({"document": "d", "text": "x"})", R"({"document": "d", "text": "y"})"}),
              HasSubstr("f line 2: field 'document' 'd' is defined twice"));
  EXPECT_THAT(Error({R"({"document": "d"})"}), HasSubstr("field 'text'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": ""})"}), HasSubstr("field 'query'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "choices": [" a"]})"}), HasSubstr("field 'choices' must be an array of 2"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "choices": [" a", 3]})"}), HasSubstr("field 'choices[1]'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "choices": [" a", " b"], "label": 2})"}),
              HasSubstr("field 'label' must be an index into 'choices' (0 to 1)"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "label": 0})"}), HasSubstr("field 'label' needs 'choices'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "task": 7})"}), HasSubstr("field 'task' must be a string"));
  EXPECT_THAT(Error({"[1, 2]"}), HasSubstr("not a JSON object"));
  EXPECT_THAT(Error({"{\"prefix\": "}), HasSubstr("not JSON"));
}

TEST_F(TaskWorkloadTest, ReadsAnswersAndTheirLabels) {
  TaskWorkloadReader r(*tok_);
  ASSERT_TRUE(r.AddLine(R"({"prefix": "p", "query": "q", "answers": ["7438291", "abc"], "max_tokens": 12, "length": 1024, "depth": 0.3})", "l1").ok());
  ASSERT_TRUE(r.AddLine(R"({"prefix": "p", "query": "q", "answers": ["x"]})", "l2").ok());
  const TaskRequest& a = r.requests()[0];
  EXPECT_EQ(a.answers, (std::vector<std::string>{"7438291", "abc"}));
  EXPECT_EQ(a.max_tokens, 12);
  EXPECT_EQ(a.length, 1024);
  EXPECT_DOUBLE_EQ(a.depth, 0.3);
  EXPECT_TRUE(a.choices.empty());
  EXPECT_EQ(r.requests()[1].max_tokens, 32);
  EXPECT_EQ(r.requests()[1].length, 0);
  EXPECT_EQ(r.requests()[1].depth, -1);
}

TEST_F(TaskWorkloadTest, BadAnswersNameTheField) {
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": []})"}), HasSubstr("field 'answers' must be an array of 1 to 32"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": "x"})"}), HasSubstr("field 'answers' must be an array"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": ["a", ""]})"}), HasSubstr("field 'answers[1]' must be a string with a non-blank character"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": [" \t "]})"}), HasSubstr("field 'answers[0]'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": ["a"], "choices": [" a", " b"]})"}),
              HasSubstr("'answers' and 'choices' exclude each other"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "max_tokens": 5})"}), HasSubstr("field 'max_tokens' needs 'answers'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": ["a"], "max_tokens": 0})"}),
              HasSubstr("field 'max_tokens' must be an integer from 1 to 256"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": ["a"], "max_tokens": 257})"}), HasSubstr("'max_tokens'"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "depth": 1.5})"}), HasSubstr("field 'depth' must be a number from 0 to 1"));
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "length": -3})"}), HasSubstr("field 'length' must be a positive integer"));
  std::string big(257, 'x');
  EXPECT_THAT(Error({R"({"prefix": "p", "query": "q", "answers": [")" + big + "\"]}"}), HasSubstr("at most 256 bytes"));
  std::string many = R"({"prefix": "p", "query": "q", "answers": [)";
  for (int i = 0; i < 33; ++i) many += std::string(i ? ", " : "") + "\"a\"";
  EXPECT_THAT(Error({many + "]}"}), HasSubstr("field 'answers' must be an array of 1 to 32"));
}

TEST_F(TaskWorkloadTest, AFileChecksTheContextWithTheAnswersLength) {
  const std::string dir = testing::MakeTempDir("workload_answers");
  const std::string path = dir + "/w.jsonl";
  std::string prefix;
  for (int i = 0; i < 4000; ++i) prefix += " and";
  // Fits without its answer, not with 200 tokens of it.
  { std::ofstream f(path); f << R"({"prefix": ")" << prefix << R"(", "query": " q", "answers": ["a"], "max_tokens": 200})" << "\n"; }
  auto r = ReadTaskWorkload(path, *tok_, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("and max_tokens - 1 are"));
  { std::ofstream f(path); f << R"({"prefix": ")" << prefix << R"(", "query": " q", "answers": ["a"], "max_tokens": 2})" << "\n"; }
  EXPECT_TRUE(ReadTaskWorkload(path, *tok_, 4096).ok());
  std::filesystem::remove_all(dir);
}

TEST_F(TaskWorkloadTest, AFileChecksTheContextWithTheLongestChoice) {
  const std::string dir = testing::MakeTempDir("workload");
  const std::string path = dir + "/w.jsonl";
  std::string long_choice = " and";
  for (int i = 0; i < 5000; ++i) long_choice += " and";
  {
    std::ofstream f(path);
    f << R"({"prefix": "p", "query": "q", "choices": [" a", " b"]})" << "\n\n"
      << R"({"prefix": "p", "query": "q", "choices": [" a", ")" << long_choice << "\"]}\n";
  }
  auto r = ReadTaskWorkload(path, *tok_, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("w.jsonl line 3: 'prefix' and 'query' and the longest choice are"));
  EXPECT_THAT(r.status().message(), HasSubstr("more than the model's context of 4096"));
  { std::ofstream f(path); f << "\n"; }
  EXPECT_THAT(ReadTaskWorkload(path, *tok_, 4096).status().message(), HasSubstr("no requests"));
  EXPECT_EQ(ReadTaskWorkload(dir + "/missing", *tok_, 4096).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadTaskWorkload(dir, *tok_, 4096).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv::bench
