// Safetensors reading: a memory-mapped file, its validated header, and a set of files (single
// model.safetensors or shards listed by model.safetensors.index.json) looked up by tensor name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mimo {

// One entry of a safetensors header, offsets made absolute within the file.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0;  // absolute byte offset in the file (8 + header_len + data_offsets[0])
  uint64_t nbytes = 0;  // numel * DTypeSize(dtype)
};

// Parses and validates the header of a safetensors image of `size` bytes (only the first
// 8 + header_len bytes are read; data offsets are checked against `size`). Checks: 8-byte length
// present and within the file, JSON object, every entry has a known dtype, integer shape and
// data_offsets, offsets within the data area, byte count == numel * dtype size, no tensor named
// twice, and the tensors' bytes tiling the data area: no overlap, no hole, no trailing byte (as
// the format and Hugging Face's reader require). `label` (the file path) prefixes every error.
// Used by the fuzzer.
StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                               const std::string& label);

// A read-only mmap of one safetensors file plus its entries. Owns the mapping; immutable after
// Open, so concurrent readers are safe.
class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* Find(const std::string& name) const;
  const void* DataOf(const SafetensorsEntry& e) const { return base_ + e.offset; }
  const uint8_t* base() const { return base_; }  // [size()] the whole mapped file
  size_t size() const { return size_; }

  // Moving the file's bytes into anonymous memory (Checkpoint::ReadThrough): Begin returns
  // [size()] writable bytes advised to use 2 MiB huge pages (nullptr if unavailable); once the
  // caller has copied the file into it, End moves it over the file mapping at the same address
  // (read-only again) so decode's weight streams avoid the 4 KiB page-cache pages' TLB misses.
  // End returns false (and frees the copy) if the move failed; the file mapping then stays.
  uint8_t* BeginAnonymousCopy() const;
  bool EndAnonymousCopy(uint8_t* copy) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;  // [size_] mapped bytes
  size_t size_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> entries_ position
};

// A tensor found in a SafetensorsSet: its entry, its file and a pointer into the mapping.
struct SafetensorsTensor {
  const SafetensorsEntry* entry = nullptr;
  const SafetensorsFile* file = nullptr;
  const void* data = nullptr;
};

// All safetensors files of a checkpoint directory, indexed by tensor name. Immutable after Open.
class SafetensorsSet {
 public:
  // Directory layout, in order of preference:
  //  1. model.safetensors.index.json: every file named in weight_map is opened; each listed
  //     tensor must exist in the file the map names (a missing file or tensor is an error).
  //     Tensors present in a listed file but absent from the map are also indexed.
  //  2. model.safetensors.
  //  3. every *.safetensors file in the directory (sorted by name).
  // A tensor name found in two files is an error.
  static StatusOr<std::unique_ptr<SafetensorsSet>> OpenDir(const std::string& dir);

  const SafetensorsTensor* Find(const std::string& name) const;
  std::vector<std::string> Names() const;  // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Status AddFile(const std::string& path, const SafetensorsFile** out);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace mimo
