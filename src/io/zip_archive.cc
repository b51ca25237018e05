// The ZIP reader behind torch.save archives (see zip_archive.h).
#include "io/zip_archive.h"

#include <algorithm>
#include <array>
#include <utility>

namespace mimo::zip {
namespace {

// CRC-32 as ZIP stores it (reflected polynomial 0xEDB88320).
uint32_t Crc32(Bytes b) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (uint8_t x : b) c = kTable[(c ^ x) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEocdSize = 22, kZip64LocatorSize = 20, kZip64EocdSize = 56;
constexpr size_t kCentralSize = 46, kLocalSize = 30;

}  // namespace

// Text from the file made safe for a message: printable ASCII kept, other bytes as \xNN, cut
// after 64 characters.
std::string Printable(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out;
  for (size_t i = 0; i < std::min(s.size(), kMax); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += StrFormat("\\x%02x", c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

// Fills the fields the central header saturated (0xFFFFFFFF) from its ZIP64 extra field (id 1:
// the saturated ones only, in the order size, compressed size, local offset).
Status ApplyZip64Extra(Bytes extra, ZipEntry* e, const std::string& what) {
  const bool need_size = e->size == 0xffffffffu, need_csize = e->compressed_size == 0xffffffffu,
             need_offset = e->local_offset == 0xffffffffu;
  if (!need_size && !need_csize && !need_offset) return Status::Ok();
  size_t p = 0;
  while (Fits(extra.size(), p, 4)) {
    const uint16_t id = LoadLE<uint16_t>(&extra[p]), len = LoadLE<uint16_t>(&extra[p + 2]);
    if (!Fits(extra.size(), p + 4, len)) break;
    if (id == 1) {
      const size_t needed = 8 * (size_t{need_size} + need_csize + need_offset);
      if (len < needed) break;
      size_t q = p + 4;
      for (auto [needed_here, field] :
           {std::pair{need_size, &e->size}, std::pair{need_csize, &e->compressed_size},
            std::pair{need_offset, &e->local_offset}}) {
        if (!needed_here) continue;
        *field = LoadLE<uint64_t>(&extra[q]);
        q += 8;
      }
      return Status::Ok();
    }
    p += 4 + len;
  }
  return InvalidArgument("%s: zip entry '%s' has ZIP64 sizes but no valid ZIP64 extra field",
                         what.c_str(), Printable(e->name).c_str());
}

StatusOr<ZipArchive> ZipArchive::Parse(Bytes bytes, const std::string& what) {
  const uint64_t size = bytes.size();
  // The EOCD record is the last thing in the file: find the signature whose comment length
  // reaches exactly to the end.
  int64_t eocd = -1;
  if (size >= kEocdSize) {
    const uint64_t lowest = size - kEocdSize > 0xffff ? size - kEocdSize - 0xffff : 0;
    for (uint64_t p = size - kEocdSize + 1; p-- > lowest;) {
      if (LoadLE<uint32_t>(&bytes[p]) == kEocdSig &&
          p + kEocdSize + LoadLE<uint16_t>(&bytes[p + 20]) == size) {
        eocd = static_cast<int64_t>(p);
        break;
      }
    }
  }
  if (eocd < 0) {
    if (size >= 2 && bytes[0] == 0x80 && bytes[1] >= 2 && bytes[1] <= 5) {
      return InvalidArgument(
          "%s: not a zip archive but a bare pickle: the legacy torch.save format (torch < 1.6 or "
          "_use_new_zipfile_serialization=False) is not supported; re-save it with torch >= 1.6",
          what.c_str());
    }
    if (size >= 4 && LoadLE<uint32_t>(bytes.data()) == kLocalSig) {
      return InvalidArgument(
          "%s: zip archive is truncated or damaged (no end-of-central-directory record)",
          what.c_str());
    }
    return InvalidArgument("%s: not a zip archive (no end-of-central-directory record)",
                           what.c_str());
  }
  const uint8_t* r = &bytes[eocd];
  uint64_t disk = LoadLE<uint16_t>(r + 4), cd_disk = LoadLE<uint16_t>(r + 6);
  uint64_t n_on_disk = LoadLE<uint16_t>(r + 8), n_entries = LoadLE<uint16_t>(r + 10);
  uint64_t cd_size = LoadLE<uint32_t>(r + 12), cd_offset = LoadLE<uint32_t>(r + 16);
  uint64_t records_start = static_cast<uint64_t>(eocd);  // where the central directory must end
  if (static_cast<uint64_t>(eocd) >= kZip64LocatorSize &&
      LoadLE<uint32_t>(&bytes[eocd - kZip64LocatorSize]) == kZip64LocatorSig) {
    const uint8_t* l = &bytes[eocd - kZip64LocatorSize];
    const uint64_t z_offset = LoadLE<uint64_t>(l + 8);
    if (LoadLE<uint32_t>(l + 4) != 0 || LoadLE<uint32_t>(l + 16) > 1) {
      return InvalidArgument("%s: multi-disk (split) zip archives are not supported", what.c_str());
    }
    if (!Fits(eocd - kZip64LocatorSize, z_offset, kZip64EocdSize) ||
        LoadLE<uint32_t>(&bytes[z_offset]) != kZip64EocdSig) {
      return InvalidArgument(
          "%s: zip archive's ZIP64 locator points at no ZIP64 end-of-central-directory record",
          what.c_str());
    }
    const uint8_t* z = &bytes[z_offset];
    disk = LoadLE<uint32_t>(z + 16);
    cd_disk = LoadLE<uint32_t>(z + 20);
    n_on_disk = LoadLE<uint64_t>(z + 24);
    n_entries = LoadLE<uint64_t>(z + 32);
    cd_size = LoadLE<uint64_t>(z + 40);
    cd_offset = LoadLE<uint64_t>(z + 48);
    records_start = z_offset;
  } else if (n_entries == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    return InvalidArgument(
        "%s: zip end-of-central-directory record says ZIP64 but there is no ZIP64 locator",
        what.c_str());
  }
  if (disk != 0 || cd_disk != 0 || n_on_disk != n_entries) {
    return InvalidArgument("%s: multi-disk (split) zip archives are not supported", what.c_str());
  }
  if (!Fits(records_start, cd_offset, cd_size)) {
    return InvalidArgument(
        "%s: zip central directory (%llu bytes at %llu) lies outside the archive (truncated?)",
        what.c_str(), static_cast<unsigned long long>(cd_size),
        static_cast<unsigned long long>(cd_offset));
  }
  if (n_entries > cd_size / kCentralSize) {
    return InvalidArgument("%s: zip central directory of %llu bytes cannot hold %llu entries",
                           what.c_str(), static_cast<unsigned long long>(cd_size),
                           static_cast<unsigned long long>(n_entries));
  }
  ZipArchive zip;
  zip.bytes_ = bytes;
  zip.what_ = what;
  zip.entries_.reserve(n_entries);
  const Bytes cd = bytes.subspan(cd_offset, cd_size);
  size_t p = 0;
  for (uint64_t i = 0; i < n_entries; ++i) {
    if (!Fits(cd.size(), p, kCentralSize) || LoadLE<uint32_t>(&cd[p]) != kCentralSig) {
      return InvalidArgument("%s: zip central directory entry %llu is damaged", what.c_str(),
                             static_cast<unsigned long long>(i));
    }
    const uint8_t* c = &cd[p];
    const size_t name_len = LoadLE<uint16_t>(c + 28), extra_len = LoadLE<uint16_t>(c + 30),
                 comment_len = LoadLE<uint16_t>(c + 32);
    if (!Fits(cd.size(), p + kCentralSize, name_len + extra_len + comment_len)) {
      return InvalidArgument("%s: zip central directory entry %llu runs past its end", what.c_str(),
                             static_cast<unsigned long long>(i));
    }
    ZipEntry e;
    e.flags = LoadLE<uint16_t>(c + 8);
    e.method = LoadLE<uint16_t>(c + 10);
    e.crc = LoadLE<uint32_t>(c + 16);
    e.compressed_size = LoadLE<uint32_t>(c + 20);
    e.size = LoadLE<uint32_t>(c + 24);
    e.local_offset = LoadLE<uint32_t>(c + 42);
    e.name.assign(reinterpret_cast<const char*>(c + kCentralSize), name_len);
    MIMO_RETURN_IF_ERROR(
        ApplyZip64Extra(cd.subspan(p + kCentralSize + name_len, extra_len), &e, what));
    if (zip.index_.count(e.name)) {
      return InvalidArgument("%s: zip archive has two entries named '%s'", what.c_str(),
                             Printable(e.name).c_str());
    }
    zip.index_.emplace(e.name, zip.entries_.size());
    zip.entries_.push_back(std::move(e));
    p += kCentralSize + name_len + extra_len + comment_len;
  }
  return zip;
}

StatusOr<Bytes> ZipArchive::Read(const ZipEntry& e) const {
  const std::string name = Printable(e.name);
  if (e.flags & 1) {
    return InvalidArgument("%s: zip entry '%s' is encrypted", what_.c_str(), name.c_str());
  }
  if (e.method != 0) {
    return InvalidArgument(
        "%s: zip entry '%s' is compressed (method %u); torch.save writes stored "
        "entries",
        what_.c_str(), name.c_str(), unsigned{e.method});
  }
  if (e.compressed_size != e.size) {
    return InvalidArgument("%s: zip entry '%s' is stored but its sizes differ (%llu vs %llu)",
                           what_.c_str(), name.c_str(),
                           static_cast<unsigned long long>(e.compressed_size),
                           static_cast<unsigned long long>(e.size));
  }
  if (!Fits(bytes_.size(), e.local_offset, kLocalSize) ||
      LoadLE<uint32_t>(&bytes_[e.local_offset]) != kLocalSig) {
    return InvalidArgument("%s: zip entry '%s' has no local header at byte %llu", what_.c_str(),
                           name.c_str(), static_cast<unsigned long long>(e.local_offset));
  }
  // The local header's name and extra lengths may differ from the central ones (torch pads the
  // local extra field so that data starts on a 64-byte boundary).
  const uint8_t* l = &bytes_[e.local_offset];
  const uint64_t name_len = LoadLE<uint16_t>(l + 26), extra_len = LoadLE<uint16_t>(l + 28);
  const uint64_t name_at = e.local_offset + kLocalSize;
  if (LoadLE<uint16_t>(l + 8) != e.method || !Fits(bytes_.size(), name_at, name_len) ||
      std::string_view(reinterpret_cast<const char*>(bytes_.data() + name_at), name_len) !=
          e.name) {
    return InvalidArgument("%s: zip entry '%s': local header disagrees with the central directory",
                           what_.c_str(), name.c_str());
  }
  const uint64_t data_at = name_at + name_len + extra_len;
  if (!Fits(bytes_.size(), data_at, e.size)) {
    return InvalidArgument(
        "%s: zip entry '%s' (%llu bytes) runs past the end of the archive "
        "(truncated?)",
        what_.c_str(), name.c_str(), static_cast<unsigned long long>(e.size));
  }
  const Bytes data = bytes_.subspan(data_at, e.size);
  if (Crc32(data) != e.crc) {
    return InvalidArgument("%s: zip entry '%s' fails its CRC-32 check (corrupt archive)",
                           what_.c_str(), name.c_str());
  }
  return data;
}

}  // namespace mimo::zip
