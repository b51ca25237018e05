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

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"

namespace {

std::string Le(uint64_t v, int n) {
  std::string o;
  for (int i = 0; i < n; ++i) o += static_cast<char>((v >> (8 * i)) & 0xff);
  return o;
}

uint32_t Crc32(const std::string& s) {
  uint32_t c = ~0u;
  for (unsigned char x : s) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// A stored (uncompressed) zip of `entries`, as torch.save lays one out minus its alignment.
std::string StoredZip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, central;
  for (const auto& [name, bytes] : entries) {
    const std::string common = Le(0, 2) + Le(0, 2) + Le(0, 2) + Le(0, 2) + Le(Crc32(bytes), 4) +
                               Le(bytes.size(), 4) + Le(bytes.size(), 4) + Le(name.size(), 2) +
                               Le(0, 2);
    central += Le(0x02014b50, 4) + Le(20, 2) + Le(20, 2) + common + Le(0, 2) + Le(0, 2) + Le(0, 2) +
               Le(0, 4) + Le(out.size(), 4) + name;
    out += Le(0x04034b50, 4) + Le(20, 2) + common + name + bytes;
  }
  const size_t offset = out.size();
  return out + central + Le(0x06054b50, 4) + Le(0, 2) + Le(0, 2) + Le(entries.size(), 2) +
         Le(entries.size(), 2) + Le(central.size(), 4) + Le(offset, 4) + Le(0, 2);
}

}  // namespace

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
    const std::string zip = StoredZip(
        {{"a/data.pkl", pickle}, {"a/data/0", std::string(256, '\x3f')}, {"a/data/1", "xxxxxx"}});
    auto r = mimo::ParseMaskEmbeddingPt({reinterpret_cast<const uint8_t*>(zip.data()), zip.size()},
                                        "fuzz");
    if (r.ok() && r->embedding.data.size() > 256) __builtin_trap();  // no bytes from nowhere
  }
  return 0;
}
