// libFuzzer harness for tokenizer.json loading (src/tokenizer/bpe.h); built and run by
// scripts/fuzz.sh. The input is the tokenizer.json text. Loading must return a Status for any
// input; a tokenizer that loads must encode and decode a fixed text and the input itself (with and
// without special tokens) without a crash or sanitizer report, and give only valid ids.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tk = mimo::Tokenizer::FromJson(json);
  if (!tk.ok()) return 0;
  const mimo::Tokenizer& t = **tk;
  for (std::string_view text : {std::string_view("Hello, world! <|im_start|>user\n12 ab\xe4\xbd\xa0"), json.substr(0, 256)}) {
    for (bool special : {true, false}) {
      const auto ids = t.Encode(text, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();
      }
      (void)t.Decode(ids, false);
      (void)t.Decode(ids, true);
    }
  }
  return 0;
}
