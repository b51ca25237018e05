// Shared fixtures of the grammar tests: the real Qwen3 tokenizer (third_party/qwen3, written by
// scripts/setup.sh), its TokenVocabulary, the EOS ids, and the schema suite in tests/data/schemas.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/token_vocabulary.h"
#include "tokenizer/bpe.h"

namespace mimo::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline const Tokenizer& QwenTokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::FromFile(std::string(MIMO_SOURCE_DIR) + "/third_party/qwen3/tokenizer.json");
    if (!t.ok()) {
      std::fprintf(stderr, "cannot load the Qwen3 tokenizer (run scripts/setup.sh): %s\n",
                   t.status().message().c_str());
      std::abort();
    }
    return std::move(t).value().release();
  }();
  return *tok;
}

inline std::shared_ptr<const TokenVocabulary> QwenVocab() {
  static const auto v = TokenVocabulary::FromTokenizer(QwenTokenizer());
  return v;
}

inline std::vector<int32_t> EosIds() {
  return {QwenTokenizer().TokenToId("<|im_end|>"), QwenTokenizer().TokenToId("<|endoftext|>")};
}

struct SuiteSchema {
  std::string name;  // file name without .json
  std::string text;
};

// tests/data/schemas/*.json, sorted by name.
inline std::vector<SuiteSchema> SchemaSuite() {
  std::vector<SuiteSchema> out;
  const std::filesystem::path dir = std::filesystem::path(MIMO_SOURCE_DIR) / "tests/data/schemas";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    out.push_back({e.path().stem().string(), ReadFile(e.path().string())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace mimo::testing
