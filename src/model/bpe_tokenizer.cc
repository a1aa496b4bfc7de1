// NewByteBpeTokenizer (model/bpe_tokenizer.h).
#include "model/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>

#include "model/utf8.h"

namespace tierkv::model {
namespace {

// The pre-tokenizers, by tokenizer.ggml.pre. The expressions are the ones
// the models' tokenizer.json files declare, with the case-insensitive
// contractions spelled out as llama.cpp does ([sS]: PCRE2's caseless mode
// would also fold U+017F into s).
struct PreTokenizer {
  const char* names[4];
  const char* regex;
  bool ignore_merges;  // a word that is itself a token is not merged (Llama 3)
  bool digits_first;   // llama.cpp's "\p{N}" pass first: every digit a word of its own (SmolLM)
};

constexpr const char* kContractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

const PreTokenizer kPreTokenizers[] = {
    {{"llama-bpe", "llama3", "llama-v3", nullptr},
     "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", true, false},
    {{"qwen2", nullptr, nullptr, nullptr},
     "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", false, false},
    {{"gpt2", nullptr, nullptr, nullptr}, nullptr, false, false},  // GPT-2's own expression, below
    // SmolLM's (and Codeshell's, EXAONE's, Minerva's): digits split one by
    // one, then GPT-2's expression within each piece between them.
    {{"smollm", "codeshell", "exaone", "minerva-7b"}, nullptr, false, true},
};
constexpr const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

const PreTokenizer* FindPreTokenizer(const std::string& name) {
  for (const PreTokenizer& p : kPreTokenizers) {
    for (const char* n : p.names) {
      if (n != nullptr && name == n) return &p;
    }
  }
  return nullptr;
}

// GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100 onwards, in byte order.
std::array<uint32_t, 256> ByteAlphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// Malformed UTF-8 bytes become U+FFFD each, as llama.cpp reads text.
std::string Sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Len(text.substr(i));
    if (n == 0) {
      out += kReplacementChar;
      i += 1;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

struct RegexDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

class ByteBpeTokenizer final : public Tokenizer {
 public:
  ByteBpeTokenizer(Vocab v, std::unique_ptr<pcre2_code, RegexDeleter> re,
                   std::unique_ptr<pcre2_code, RegexDeleter> digits, bool ignore_merges)
      : v_(std::move(v)),
        controls_(VocabControlTokens(v_)),
        re_(std::move(re)),
        digits_(std::move(digits)),
        ignore_merges_(ignore_merges) {
    const std::array<uint32_t, 256> cp = ByteAlphabet();
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(cp[b], &byte_char_[b]);
      char_byte_[cp[b]] = static_cast<uint8_t>(b);
    }
    for (size_t i = 0; i < v_.pieces.size(); ++i) {
      index_.emplace(v_.pieces[i], static_cast<int32_t>(i));
      if (!v_.types.empty() && v_.types[i] == 4) user_defined_.emplace_back(v_.pieces[i], static_cast<int32_t>(i));
    }
    // Longest first, as llama.cpp partitions: a longer token wins over one it contains.
    SortLongestFirst(&user_defined_);
    // The merges live on as the rank table's keys only.
    for (size_t r = 0; r < v_.merges.size(); ++r) ranks_.emplace(std::move(v_.merges[r]), static_cast<int>(r));
    v_.merges = {};
  }

  int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
  int32_t bos_id() const override { return v_.bos_id; }
  int32_t eos_id() const override { return v_.eos_id; }
  std::span<const std::pair<std::string, int32_t>> ControlTokens() const override { return controls_; }

  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> out;
    if (add_bos && v_.add_bos) out.push_back(v_.bos_id);
    const std::string clean = Sanitize(text);
    for (const TextOrToken& f : PartitionAtTokens(clean, user_defined_)) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        RETURN_IF_ERROR(EncodeText(f.text, &out));
      }
    }
    return out;
  }

  std::string DecodePiece(int32_t /*prev*/, int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const int32_t type = v_.types.empty() ? 1 : v_.types[id];
    if (type == 3 || type == 5) return "";  // control, unused
    const std::string& p = v_.pieces[id];
    if (type == 4) return p;  // user-defined tokens are their text
    std::string out;
    for (size_t i = 0; i < p.size();) {
      const std::string_view rest = std::string_view(p).substr(i);
      const size_t n = Utf8Len(rest);
      if (n == 0) {  // not UTF-8: the byte as it is
        out += p[i++];
        continue;
      }
      auto it = char_byte_.find(Utf8Decode(rest, n));
      if (it != char_byte_.end()) {
        out += static_cast<char>(it->second);
      } else {
        out.append(rest.substr(0, n));
      }
      i += n;
    }
    return out;
  }

 private:
  // Splits by the pre-tokenizer and appends each word's tokens: first
  // every digit alone where the pre-tokenizer says so, then the word
  // expression within each piece between digits (llama.cpp applies its
  // expressions in turn, each within the pieces of the one before).
  Status EncodeText(std::string_view text, std::vector<int32_t>* out) const {
    if (!digits_) return EncodeWords(text, out);
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(digits_.get(), nullptr));
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      const int rc = pcre2_match(digits_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) return Status::ResourceExhausted("digit split failed (PCRE2 error " + std::to_string(rc) + ")");
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      RETURN_IF_ERROR(EncodeWords(text.substr(at, ov[0] - at), out));
      EncodeWord(text.substr(ov[0], ov[1] - ov[0]), out);  // one digit: never empty (\p{N} is one character)
      at = ov[1];
    }
    return EncodeWords(text.substr(at), out);
  }

  // Splits `text` by the word expression and appends each word's tokens.
  Status EncodeWords(std::string_view text, std::vector<int32_t>* out) const {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(re_.get(), nullptr));
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      const int rc = pcre2_match(re_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        EncodeWord(text.substr(at), out);
        break;
      }
      if (rc < 0) {
        return Status::ResourceExhausted("pre-tokenizer match failed (PCRE2 error " + std::to_string(rc) + ")");
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      if (ov[0] > at) EncodeWord(text.substr(at, ov[0] - at), out);  // text no alternative covers
      size_t end = ov[1];
      if (end == ov[0]) end += std::max<size_t>(1, Utf8Len(text.substr(end)));  // an empty match moves on a character
      EncodeWord(text.substr(ov[0], end - ov[0]), out);
      at = end;
    }
    return Status::Ok();
  }

  void EncodeWord(std::string_view raw, std::vector<int32_t>* out) const {
    if (raw.empty()) return;
    std::string word;
    for (unsigned char b : raw) word += byte_char_[b];
    if (ignore_merges_) {
      auto it = index_.find(word);
      if (it != index_.end()) {
        out->push_back(it->second);
        return;
      }
    }
    for (const std::string& piece : Merge(word)) {
      auto it = index_.find(piece);
      if (it != index_.end()) {
        out->push_back(it->second);
        continue;
      }
      // Not a token: its characters one by one (each a byte's character).
      for (size_t i = 0; i < piece.size();) {
        const size_t n = std::max<size_t>(1, Utf8Len(std::string_view(piece).substr(i)));
        auto c = index_.find(piece.substr(i, n));
        if (c != index_.end()) out->push_back(c->second);
        i += n;
      }
    }
  }

  // The word's symbols (characters) merged by rank until no adjacent pair
  // is a merge.
  std::vector<std::string> Merge(const std::string& word) const {
    struct Sym {
      size_t begin, len;
      int prev, next;
    };
    std::vector<Sym> syms;
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::max<size_t>(1, Utf8Len(std::string_view(word).substr(i)));
      const int k = static_cast<int>(syms.size());
      syms.push_back({i, n, k - 1, -1});
      if (k > 0) syms[k - 1].next = k;
      i += n;
    }
    struct Pair {
      int rank, left, right;
      size_t len;  // the pair's bytes when pushed: a stale pair no longer sums to it
      bool operator<(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Pair> q;
    auto consider = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      std::string key = word.substr(syms[l].begin, syms[l].len);
      key += ' ';
      key.append(word, syms[r].begin, syms[r].len);
      auto it = ranks_.find(key);
      if (it != ranks_.end()) q.push({it->second, l, r, syms[l].len + syms[r].len});
    };
    for (size_t i = 1; i < syms.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!q.empty()) {
      const Pair p = q.top();
      q.pop();
      Sym& L = syms[p.left];
      Sym& R = syms[p.right];
      if (L.len == 0 || R.len == 0 || L.next != p.right || L.len + R.len != p.len) continue;
      L.len += R.len;
      R.len = 0;
      L.next = R.next;
      if (R.next >= 0) syms[R.next].prev = p.left;
      consider(L.prev, p.left);
      consider(p.left, L.next);
    }
    std::vector<std::string> pieces;
    for (const Sym& s : syms) {
      if (s.len > 0) pieces.push_back(word.substr(s.begin, s.len));
    }
    return pieces;
  }

  Vocab v_;
  std::vector<std::pair<std::string, int32_t>> controls_;
  std::unique_ptr<pcre2_code, RegexDeleter> re_;  // read-only after construction: shared by threads
  std::unique_ptr<pcre2_code, RegexDeleter> digits_;  // "\p{N}", or null: read-only, shared as re_
  bool ignore_merges_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<std::string, int> ranks_;  // "left right" -> rank
  std::vector<std::pair<std::string, int32_t>> user_defined_;  // text in the text stays these tokens; longest first
  std::array<std::string, 256> byte_char_;
  std::unordered_map<uint32_t, uint8_t> char_byte_;
};

// A pre-tokenizer's expression, compiled for UTF-8 with Unicode classes
// (JIT where PCRE2 has it: optional, without it PCRE2 interprets).
Result<std::unique_ptr<pcre2_code, RegexDeleter>> CompileRegex(const std::string& pre, const std::string& regex) {
  int err = 0;
  PCRE2_SIZE err_at = 0;
  std::unique_ptr<pcre2_code, RegexDeleter> re(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.c_str()),
                                                             PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                                                             &err_at, nullptr));
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return Status::InvalidArgument("pre-tokenizer '" + pre + "': " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(re.get(), PCRE2_JIT_COMPLETE);
  return re;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> NewByteBpeTokenizer(Vocab vocab) {
  const PreTokenizer* pre = FindPreTokenizer(vocab.pre);
  if (pre == nullptr) {
    return Status::InvalidArgument("tokenizer.ggml.pre '" + vocab.pre +
                                   "' is not a pre-tokenizer this build knows (llama-bpe, llama3, llama-v3, qwen2, gpt2, "
                                   "smollm, codeshell, exaone, minerva-7b)");
  }
  const size_t n = vocab.pieces.size();
  if (n == 0) return Status::InvalidArgument("empty vocabulary");
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return Status::InvalidArgument("vocabulary types/pieces differ in size");
  }
  for (int32_t id : {vocab.bos_id, vocab.eos_id}) {
    if (id >= static_cast<int64_t>(n)) {
      return Status::InvalidArgument("special token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  const std::string regex = pre->regex ? std::string(kContractions) + pre->regex : kGpt2Regex;
  ASSIGN_OR_RETURN(auto re, CompileRegex(vocab.pre, regex));
  std::unique_ptr<pcre2_code, RegexDeleter> digits;
  if (pre->digits_first) {
    ASSIGN_OR_RETURN(digits, CompileRegex(vocab.pre, "\\p{N}"));
  }
  const bool ignore = pre->ignore_merges;
  return std::unique_ptr<Tokenizer>(new ByteBpeTokenizer(std::move(vocab), std::move(re), std::move(digits), ignore));
}

}  // namespace tierkv::model
