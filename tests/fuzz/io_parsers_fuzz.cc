// libFuzzer harness for the checkpoint parsers; built and run by scripts/fuzz.sh (part of the test
// command). Rerun one input: build-fuzz/io_parsers_fuzz FILE.
// The first input byte picks the parser: odd -> config.json (model and DFlash drafter); 0 mod 4 ->
// safetensors header; 2 mod 8 -> a torch.save archive (mask_embedding.pt); 6 mod 8 -> a pickle,
// wrapped here in a well-formed stored zip beside two storages (most mutations of a whole archive
// only break its CRCs, so the pickle reader is reached this way). Every parser must return a Status
// for any input; a crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../io/stored_zip.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 1) {
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    (void)mimo::ParseModelConfig(text);
    (void)mimo::ParseDFlashConfig(text);  // a drafter's config.json, same reader
  } else if (data[0] % 4 == 0) {
    auto entries = mimo::ParseSafetensorsHeader(data + 1, size - 1, "fuzz");
    if (entries.ok()) {
      for (const auto& e : *entries) {
        if (e.offset + e.nbytes > size - 1) __builtin_trap();  // validated offsets must fit
      }
    }
  } else if (data[0] % 8 == 2) {
    (void)mimo::ParseMaskEmbeddingPt({data + 1, size - 1}, "fuzz");
  } else {
    const std::string pickle(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::string zip = mimo::test::StoredZip(
        {{"a/data.pkl", pickle}, {"a/data/0", std::string(256, '\x3f')}, {"a/data/1", "xxxxxx"}});
    auto r = mimo::ParseMaskEmbeddingPt({reinterpret_cast<const uint8_t*>(zip.data()), zip.size()},
                                        "fuzz");
    if (r.ok() && r->embedding.data.size() > 256) __builtin_trap();  // no bytes from nowhere
  }
  return 0;
}
