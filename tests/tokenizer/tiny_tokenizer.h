// A tiny byte-level BPE tokenizer.json built in code for unit tests: the 256 byte tokens (id =
// byte value), a few merges and added tokens, and the Qwen2 pre-tokenizer regex.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"

namespace mimo::testing {

inline const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct TinySpec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, in rank order
  bool merges_as_strings = false;                           // "a b" instead of ["a", "b"]
  std::vector<nlohmann::json> added_tokens;
  bool nfc = true;
};

// Vocab: bytes 0..255 -> ids 0..255, then one id per merge result (256, 257, ...).
inline std::string TinyTokenizerJson(const TinySpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<uint8_t>(b))] = b;
  nlohmann::json merges = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : spec.merges) {
    const std::string ea = ByteLevelEncode(a), eb = ByteLevelEncode(b);
    if (!vocab.contains(ea + eb)) vocab[ea + eb] = next++;
    if (spec.merges_as_strings) {
      merges.push_back(ea + " " + eb);
    } else {
      merges.push_back({ea, eb});
    }
  }
  nlohmann::json bl = {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", false},
                       {"use_regex", false}};
  nlohmann::json root = {
      {"version", "1.0"},
      {"added_tokens", spec.added_tokens},
      {"normalizer", spec.nfc ? nlohmann::json{{"type", "NFC"}} : nlohmann::json()},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwen2Pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          bl}}}},
      {"post_processor", bl},
      {"decoder", bl},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return root.dump();
}

inline nlohmann::json Added(int id, const std::string& content, bool special, bool lstrip = false,
                            bool rstrip = false) {
  return {{"id", id},         {"content", content},  {"single_word", false}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
}

}  // namespace mimo::testing
