// The ZIP container torch.save (>= 1.6) writes, read through its central directory (PKWARE
// APPNOTE 6.3: end-of-central-directory record and its ZIP64 twin, central directory, local
// headers). Only stored entries can be read, and every read is checked against the input's size.
// Used by io/torch_pickle.cc; the small byte helpers are shared with its pickle machine.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mimo::zip {

using Bytes = std::span<const uint8_t>;

// True when [off, off + n) lies inside a buffer of `size` bytes.
inline bool Fits(uint64_t size, uint64_t off, uint64_t n) { return off <= size && n <= size - off; }

template <typename T>
T LoadLE(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Text from the file made safe for a message: printable ASCII kept, other bytes as \xNN, cut
// after 64 characters.
std::string Printable(std::string_view s);

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_offset = 0;
};

class ZipArchive {
 public:
  // The entries of the archive in `bytes` (which must outlive it); `what` names it in errors.
  static StatusOr<ZipArchive> Parse(Bytes bytes, const std::string& what);

  const ZipEntry* Find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
  }
  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The bytes of a stored entry, after checking its local header, bounds and CRC-32.
  StatusOr<Bytes> Read(const ZipEntry& e) const;

 private:
  Bytes bytes_;
  std::string what_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> entries_ position
};

}  // namespace mimo::zip
