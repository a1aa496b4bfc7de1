#include "tierkv/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "model/bpe_tokenizer.h"
#include "model/gguf.h"
#include "model/gguf_vocab.h"
#include "model/utf8.h"

namespace tierkv {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// "<0x0A>" -> 10; -1 if the piece is not a byte piece.
int ParseBytePiece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  auto hex = [](char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  int hi = hex(p[3]), lo = hex(p[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// SentencePiece's remove_extra_whitespaces: only U+0020 counts as a space.
std::string CollapseSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool prev_space = true;  // drops leading spaces
  for (char ch : text) {
    if (ch == ' ') {
      if (!prev_space) out += ' ';
      prev_space = true;
    } else {
      out += ch;
      prev_space = false;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}


// Score-driven BPE over a vocabulary: the algorithm of SentencePiece's BPE
// encoder and of llama2.c: start from characters (bytes when a character is
// not in the vocabulary), then repeatedly merge the adjacent pair whose
// concatenation is in the vocabulary with the highest score, leftmost first.
class VocabTokenizer final : public Tokenizer {
 public:
  explicit VocabTokenizer(Vocab v) : v_(std::move(v)), controls_(VocabControlTokens(v_)) {
    std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
    for (size_t i = 0; i < v_.pieces.size(); ++i) {
      std::string text = ReplaceAll(v_.pieces[i], kSpace, " ");
      const int32_t type = v_.types.empty() ? 1 : v_.types[i];
      const int b = ParseBytePiece(v_.pieces[i]);
      if (b >= 0 && (v_.types.empty() || type == 6)) {
        byte_id_[b] = static_cast<int32_t>(i);
        continue;
      }
      // Control and unknown pieces are never produced from text.
      if (type == 2 || type == 3 || static_cast<int32_t>(i) == v_.bos_id ||
          static_cast<int32_t>(i) == v_.eos_id) {
        continue;
      }
      index_.emplace(std::move(text), static_cast<int32_t>(i));
    }
  }

  int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
  int32_t bos_id() const override { return v_.bos_id; }
  int32_t eos_id() const override { return v_.eos_id; }
  std::span<const std::pair<std::string, int32_t>> ControlTokens() const override { return controls_; }

  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> out;
    if (add_bos) out.push_back(v_.bos_id);
    std::string normalized;
    if (v_.remove_extra_whitespaces) {
      normalized = CollapseSpaces(text);
      text = normalized;
    }
    if (text.empty()) return out;
    struct Sym {
      int32_t id;
      std::string text;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    auto push_text = [&](std::string_view piece) {
      auto it = index_.find(std::string(piece));
      if (it != index_.end()) {
        syms.push_back({it->second, std::string(piece), 0, 0, true});
        return;
      }
      for (unsigned char ch : piece) {
        int32_t id = byte_id_[ch] >= 0 ? byte_id_[ch] : v_.unk_id;
        // Byte symbols never merge (their text is empty for lookups).
        syms.push_back({id, std::string(), 0, 0, true});
      }
    };
    push_text(" ");  // SentencePiece's dummy prefix
    for (size_t i = 0; i < text.size();) {
      const size_t n = model::Utf8Len(text.substr(i));
      if (n == 0) {  // as SentencePiece: each malformed byte becomes U+FFFD
        push_text(model::kReplacementChar);
        i += 1;
        continue;
      }
      push_text(text.substr(i, n));
      i += n;
    }
    const int n = static_cast<int>(syms.size());
    for (int i = 0; i < n; ++i) {
      syms[i].prev = i - 1;
      syms[i].next = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      float score;
      int left;
      int right;
      size_t len;  // to detect stale candidates
      bool operator<(const Cand& o) const {
        if (score != o.score) return score < o.score;
        return left > o.left;  // leftmost first among equal scores
      }
    };
    std::priority_queue<Cand> heap;
    auto consider = [&](int l) {
      if (l < 0) return;
      const int r = syms[l].next;
      if (r < 0 || syms[l].text.empty() || syms[r].text.empty()) return;
      auto it = index_.find(syms[l].text + syms[r].text);
      if (it == index_.end()) return;
      heap.push({v_.scores[it->second], l, r, syms[l].text.size() + syms[r].text.size()});
    };
    for (int i = 0; i < n; ++i) consider(i);
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      Sym& L = syms[c.left];
      if (!L.alive || L.next != c.right || !syms[c.right].alive ||
          L.text.size() + syms[c.right].text.size() != c.len) {
        continue;
      }
      Sym& R = syms[c.right];
      L.text += R.text;
      L.id = index_.at(L.text);
      R.alive = false;
      L.next = R.next;
      if (R.next >= 0) syms[R.next].prev = c.left;
      consider(L.prev);
      consider(c.left);
    }
    for (const Sym& s : syms) {
      if (s.alive) out.push_back(s.id);
    }
    return out;
  }

  std::string DecodePiece(int32_t prev, int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const int32_t type = v_.types.empty() ? 1 : v_.types[id];
    if (type == 3 || id == v_.bos_id || id == v_.eos_id) return "";
    const int b = ParseBytePiece(v_.pieces[id]);
    if (b >= 0 && (v_.types.empty() || type == 6)) return std::string(1, static_cast<char>(b));
    std::string s = ReplaceAll(v_.pieces[id], kSpace, " ");
    if (prev == v_.bos_id && !s.empty() && s[0] == ' ') s.erase(0, 1);
    return s;
  }

 private:
  Vocab v_;
  std::vector<std::pair<std::string, int32_t>> controls_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t byte_id_[256];
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
      : sp_(std::move(sp)) {
    for (int id = 0; id < sp_->GetPieceSize(); ++id) {
      if (sp_->IsControl(id)) controls_.emplace_back(sp_->IdToPiece(id), id);
    }
    SortLongestFirst(&controls_);
  }

  int vocab_size() const override { return sp_->GetPieceSize(); }
  int32_t bos_id() const override { return sp_->bos_id(); }
  int32_t eos_id() const override { return sp_->eos_id(); }
  std::span<const std::pair<std::string, int32_t>> ControlTokens() const override { return controls_; }

  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    auto st = sp_->Encode(text, &ids);
    if (!st.ok()) return Status::InvalidArgument("SentencePiece encode: " + st.ToString());
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_bos) out.push_back(bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string DecodePiece(int32_t prev, int32_t id) const override {
    if (id < 0 || id >= vocab_size() || sp_->IsControl(id) || sp_->IsUnused(id)) return "";
    const std::string& piece = sp_->IdToPiece(id);
    if (sp_->IsByte(id)) {
      const int b = ParseBytePiece(piece);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : "";
    }
    std::string s = ReplaceAll(piece, kSpace, " ");
    if (prev == bos_id() && !s.empty() && s[0] == ' ') s.erase(0, 1);
    return s;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::pair<std::string, int32_t>> controls_;
};

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void SortLongestFirst(std::vector<std::pair<std::string, int32_t>>* tokens) {
  std::stable_sort(tokens->begin(), tokens->end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::vector<std::pair<std::string, int32_t>> VocabControlTokens(const Vocab& v) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const bool control = !v.types.empty() && v.types[i] == 3;
    if ((control || id == v.bos_id || id == v.eos_id) && !v.pieces[i].empty()) out.emplace_back(v.pieces[i], id);
  }
  SortLongestFirst(&out);
  return out;
}

std::vector<TextOrToken> PartitionAtTokens(std::string_view text,
                                           std::span<const std::pair<std::string, int32_t>> tokens) {
  std::vector<TextOrToken> runs;
  if (!text.empty()) runs.push_back({text, -1});
  for (const auto& [piece, id] : tokens) {
    if (piece.empty()) continue;
    std::vector<TextOrToken> next;
    for (const TextOrToken& r : runs) {
      if (r.token >= 0) {
        next.push_back(r);
        continue;
      }
      size_t at = 0;
      for (size_t hit; (hit = r.text.find(piece, at)) != std::string_view::npos; at = hit + piece.size()) {
        if (hit > at) next.push_back({r.text.substr(at, hit - at), -1});
        next.push_back({{}, id});
      }
      if (at < r.text.size()) next.push_back({r.text.substr(at), -1});
    }
    runs = std::move(next);
  }
  return runs;
}

std::vector<TextOrToken> SplitAtControlTokens(const Tokenizer& tok, std::string_view text) {
  return PartitionAtTokens(text, tok.ControlTokens());
}

Result<std::vector<int32_t>> Tokenizer::EncodeSpecial(std::string_view text) const {
  std::vector<int32_t> out;
  for (const TextOrToken& p : SplitAtControlTokens(*this, text)) {
    if (p.token >= 0) {
      out.push_back(p.token);
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> t, Encode(p.text, /*add_bos=*/false));
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

std::string Tokenizer::ControlText(int32_t id) const {
  for (const auto& c : ControlTokens()) {
    if (c.second == id) return c.first;
  }
  return "";
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += DecodePiece(prev, id);
    prev = id;
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto st = sp->Load(path);
  if (!st.ok()) {
    return Status::InvalidArgument("cannot load SentencePiece model " + path + ": " +
                                   st.ToString());
  }
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

Result<Vocab> ReadLlama2cVocab(const std::string& path, int vocab_size, FileSystem* fs) {
  auto data = ReadFileToString(fs, path);
  if (!data.ok()) return data.status().WithContext("cannot read tokenizer");
  const std::string& d = *data;
  size_t pos = 0;
  auto read = [&](void* out, size_t n) {
    if (d.size() - pos < n) return false;
    std::memcpy(out, d.data() + pos, n);
    pos += n;
    return true;
  };
  int32_t max_len;
  if (!read(&max_len, 4) || max_len <= 0 || max_len > (1 << 16)) {
    return Status::InvalidArgument("tokenizer " + path + ": not a llama2.c tokenizer.bin (max_token_length field)");
  }
  Vocab v;
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  for (int i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    if (!read(&score, 4) || !read(&len, 4)) {
      return Status::InvalidArgument("tokenizer " + path + ": holds only " + std::to_string(i) +
                                     " tokens, the model's vocabulary has " +
                                     std::to_string(vocab_size) + " (wrong tokenizer?)");
    }
    if (len < 0 || len > max_len || d.size() - pos < static_cast<size_t>(len)) {
      return Status::InvalidArgument("tokenizer " + path + ": token " + std::to_string(i) + " has length " +
                                     std::to_string(len) + " (max_token_length " +
                                     std::to_string(max_len) + ", or file truncated)");
    }
    std::string piece(d.data() + pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    int32_t type = 1;
    if (i == v.bos_id) {
      piece = "<s>";
      type = 3;
    } else if (i == v.eos_id) {
      piece = "</s>";
      type = 3;
    } else if (i == v.unk_id) {
      type = 2;
    } else if (ParseBytePiece(piece) >= 0) {
      type = 6;
    }
    v.pieces.push_back(ReplaceAll(std::move(piece), " ", kSpace));
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  if (pos != d.size()) {
    return Status::InvalidArgument("tokenizer " + path + ": holds more than the model's " +
                                   std::to_string(vocab_size) +
                                   " tokens (wrong tokenizer for this model?)");
  }
  return v;
}

Result<std::unique_ptr<Tokenizer>> NewVocabTokenizer(Vocab vocab) {
  if (vocab.kind == Vocab::Kind::kByteBpe) return model::NewByteBpeTokenizer(std::move(vocab));
  const size_t n = vocab.pieces.size();
  if (n == 0) return Status::InvalidArgument("empty vocabulary");
  if (vocab.scores.size() != n) return Status::InvalidArgument("vocabulary scores/pieces differ in size");
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return Status::InvalidArgument("vocabulary types/pieces differ in size");
  }
  for (int32_t id : {vocab.bos_id, vocab.eos_id, vocab.unk_id}) {
    if (id < 0 || static_cast<size_t>(id) >= n) {
      return Status::InvalidArgument("special token id " + std::to_string(id) +
                                     " is outside the vocabulary");
    }
  }
  return std::unique_ptr<Tokenizer>(new VocabTokenizer(std::move(vocab)));
}

Result<Vocab> LoadGgufVocab(const std::string& path, FileSystem* fs) {
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(fs, path));
  ASSIGN_OR_RETURN(model::GgufFile f, model::GgufFile::Parse(path, data));
  return model::ReadGgufVocab(f, path);
}

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path, FileSystem* fs) {
  ASSIGN_OR_RETURN(Vocab v, LoadGgufVocab(path, fs));
  auto tok = NewVocabTokenizer(std::move(v));
  if (!tok.ok()) return tok.status().WithContext(path);
  return tok;
}

Result<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path, int vocab_size,
                                                        FileSystem* fs) {
  ASSIGN_OR_RETURN(Vocab v, ReadLlama2cVocab(path, vocab_size, fs));
  return NewVocabTokenizer(std::move(v));
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizerFor(const Model& model, const std::string& path) {
  const int want = model.config().vocab_size;
  std::unique_ptr<Tokenizer> tok;
  if (path.empty()) {
    if (!model.embedded_vocab()) {
      return Status::InvalidArgument(
          "the model file has no embedded tokenizer; pass --tokenizer (a SentencePiece .model, "
          "a GGUF file with tokenizer.ggml.* metadata, or a llama2.c tokenizer.bin)");
    }
    ASSIGN_OR_RETURN(tok, NewVocabTokenizer(*model.embedded_vocab()));
  } else if (EndsWith(path, ".model")) {
    ASSIGN_OR_RETURN(tok, LoadSentencePieceTokenizer(path));
  } else if (EndsWith(path, ".gguf")) {
    ASSIGN_OR_RETURN(tok, LoadGgufTokenizer(path));
  } else {
    ASSIGN_OR_RETURN(tok, LoadLlama2cTokenizer(path, want));
  }
  if (tok->vocab_size() != want) {
    return Status::InvalidArgument("tokenizer " + (path.empty() ? "(embedded)" : path) + " has " +
                                   std::to_string(tok->vocab_size()) +
                                   " tokens but the model's vocabulary has " +
                                   std::to_string(want) + ": they do not belong together");
  }
  return tok;
}

}  // namespace tierkv
