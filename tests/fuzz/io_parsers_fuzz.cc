// libFuzzer harness for the checkpoint parsers; built and run by scripts/fuzz.sh (part of the test
// command). Rerun one input: build-fuzz/io_parsers_fuzz FILE.
// The first input byte picks the parser: even -> safetensors header, odd -> config.json.
// Both must return a Status for any input; a crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/hf_config.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    auto entries = mimo::ParseSafetensorsHeader(data + 1, size - 1, "fuzz");
    if (entries.ok()) {
      for (const auto& e : *entries) {
        if (e.offset + e.nbytes > size - 1) __builtin_trap();  // validated offsets must fit
      }
    }
  } else {
    auto config =
        mimo::ParseModelConfig(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
    (void)config;
  }
  return 0;
}
