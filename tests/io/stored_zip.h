// A stored (uncompressed) zip writer for tests and fuzz harnesses that build torch.save-shaped
// archives by hand (APPNOTE 4.3: local headers, central directory, EOCD; no ZIP64, no padding).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mimo::test {

// v as n little-endian bytes.
inline std::string LE(uint64_t v, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

inline uint32_t BitwiseCrc32(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char x : s) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// entries: (name, bytes) in archive order.
inline std::string StoredZip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const std::string common = LE(0, 2) + LE(0, 2) + LE(0, 2) + LE(0, 2) +
                               LE(BitwiseCrc32(data), 4) + LE(data.size(), 4) + LE(data.size(), 4) +
                               LE(name.size(), 2) + LE(0, 2);
    central += LE(0x02014b50, 4) + LE(20, 2) + LE(20, 2) + common + LE(0, 2) + LE(0, 2) + LE(0, 2) +
               LE(0, 4) + LE(out.size(), 4) + name;
    out += LE(0x04034b50, 4) + LE(20, 2) + common + name + data;
  }
  const size_t cd_offset = out.size();
  return out + central + LE(0x06054b50, 4) + LE(0, 2) + LE(0, 2) + LE(entries.size(), 2) +
         LE(entries.size(), 2) + LE(central.size(), 4) + LE(cd_offset, 4) + LE(0, 2);
}

}  // namespace mimo::test
