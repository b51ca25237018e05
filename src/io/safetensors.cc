// Safetensors header validation, mmap and multi-shard lookup. Every malformed input becomes a
// Status naming the file (and tensor); nothing here aborts on bad bytes.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace mimo {
namespace {

using json = nlohmann::json;

// Header JSON larger than this is refused before any allocation (real headers are a few MB).
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

Status ParseEntry(const std::string& name, const json& v, const std::string& label,
                  uint64_t data_base, uint64_t data_size, SafetensorsEntry* e) {
  const char* f = label.c_str();
  const char* n = name.c_str();
  if (!v.is_object()) return DataLoss("%s: header entry '%s' is not an object", f, n);
  e->name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) {
    return DataLoss("%s: tensor '%s' has no string 'dtype'", f, n);
  }
  const std::string dts = dt->get<std::string>();
  if (!ParseDType(dts, &e->dtype)) {
    return Unimplemented(
        "%s: tensor '%s' has unsupported dtype '%s' (supported: F32, BF16, F16, "
        "F8_E4M3, U8, I32, I64)",
        f, n, dts.c_str());
  }
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array())
    return DataLoss("%s: tensor '%s' has no 'shape' list", f, n);
  uint64_t numel = 1;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
      return DataLoss("%s: tensor '%s' has a bad shape %s", f, n, sh->dump().substr(0, 80).c_str());
    }
    uint64_t x = d.get<uint64_t>();
    if (x > (1ull << 48) || MulOverflows(numel, x, &numel)) {
      return DataLoss("%s: tensor '%s' shape %s overflows", f, n, sh->dump().substr(0, 80).c_str());
    }
    e->shape.push_back(static_cast<int64_t>(x));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return DataLoss("%s: tensor '%s' needs 'data_offsets' [begin, end] of non-negative integers", f,
                    n);
  }
  const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return DataLoss(
        "%s: tensor '%s' data_offsets [%llu, %llu] lie outside the data area of %llu "
        "bytes (truncated file?)",
        f, n, static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end),
        static_cast<unsigned long long>(data_size));
  }
  uint64_t want = 0;
  if (MulOverflows(numel, DTypeSize(e->dtype), &want) || want != end - begin) {
    return DataLoss("%s: tensor '%s' (%s %s) needs %llu bytes but data_offsets give %llu", f, n,
                    dts.c_str(), ShapeToString(e->shape).c_str(),
                    static_cast<unsigned long long>(want),
                    static_cast<unsigned long long>(end - begin));
  }
  e->offset = data_base + begin;
  e->nbytes = end - begin;
  return Status::Ok();
}

// The tensors' byte ranges must tile the data area: no two overlap (one tensor's bytes read as
// another's), and no byte belongs to none, before, between or after them. The format requires
// the latter too ("the byte buffer needs to be entirely indexed, and cannot contain holes": a
// hole could carry a second file, a polyglot), and Hugging Face's reader refuses such files
// (InvalidOffset, MetadataIncompleteBuffer), so no checkpoint that transformers or vLLM load has
// one; every writer here (make_tiny_model.py, nano_io.py, `mimo quantize`) writes the tensors
// back to back. Zero-byte tensors hold no bytes and may sit at any offset within the area.
Status CheckDataAreaTiling(const std::vector<SafetensorsEntry>& entries, uint64_t data_base,
                           uint64_t data_size, const std::string& label) {
  const char* f = label.c_str();
  std::vector<const SafetensorsEntry*> by_off;
  for (const auto& e : entries) {
    if (e.nbytes) by_off.push_back(&e);
  }
  std::sort(by_off.begin(), by_off.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->offset < b->offset;
  });
  auto range = [&](const SafetensorsEntry* e) {
    return StrFormat("[%llu, %llu)", static_cast<unsigned long long>(e->offset - data_base),
                     static_cast<unsigned long long>(e->offset - data_base + e->nbytes));
  };
  uint64_t covered = data_base;  // absolute offset up to which the area is accounted for
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : by_off) {
    if (prev && e->offset < covered) {
      // Sorted by start, so any overlap shows between neighbours.
      return DataLoss("%s: tensors '%s' %s and '%s' %s overlap in the data area", f,
                      prev->name.c_str(), range(prev).c_str(), e->name.c_str(), range(e).c_str());
    }
    if (e->offset > covered) {
      return DataLoss(
          "%s: %llu bytes of the data area %s tensor '%s' %s belong to no tensor (safetensors "
          "requires the data area to be indexed entirely, without holes)",
          f, static_cast<unsigned long long>(e->offset - covered),
          prev ? ("between tensor '" + prev->name + "' " + range(prev) + " and").c_str()
               : "before",
          e->name.c_str(), range(e).c_str());
    }
    covered = e->offset + e->nbytes;
    prev = e;
  }
  if (covered < data_base + data_size) {
    return DataLoss(
        "%s: %llu bytes of the data area %s belong to no tensor (safetensors requires the data "
        "area to be indexed entirely, without trailing bytes)",
        f, static_cast<unsigned long long>(data_base + data_size - covered),
        prev ? ("after tensor '" + prev->name + "' " + range(prev)).c_str()
             : "(the header lists no tensor data)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                               const std::string& label) {
  const char* f = label.c_str();
  if (size < 8)
    return DataLoss("%s: file is %zu bytes, too short for a safetensors header", f, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];  // little-endian
  if (header_len > size - 8) {
    return DataLoss(
        "%s: header length %llu exceeds the file size %zu (truncated or not a "
        "safetensors file)",
        f, static_cast<unsigned long long>(header_len), size);
  }
  if (header_len > kMaxHeaderBytes) {
    return DataLoss("%s: header length %llu is implausibly large", f,
                    static_cast<unsigned long long>(header_len));
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  // The format disallows duplicate keys; a JSON object keeps only the last, which would hide a
  // tensor (and its bytes) the file's writer meant. The first duplicate name is kept here.
  std::set<std::string> keys;
  std::string duplicate;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event,
                                                json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json h = json::parse(text, text + header_len, note_keys, /*allow_exceptions=*/false);
  if (h.is_discarded()) return DataLoss("%s: header is not valid JSON", f);
  if (!h.is_object()) return DataLoss("%s: header is not a JSON object", f);
  if (!duplicate.empty()) {
    return DataLoss("%s: header names '%s' twice (safetensors disallows duplicate keys)", f,
                    duplicate.substr(0, 200).c_str());
  }

  const uint64_t data_base = 8 + header_len;
  const uint64_t data_size = size - data_base;
  std::vector<SafetensorsEntry> entries;
  entries.reserve(h.size());
  try {
    for (auto it = h.begin(); it != h.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      SafetensorsEntry e;
      MIMO_RETURN_IF_ERROR(ParseEntry(it.key(), it.value(), label, data_base, data_size, &e));
      entries.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    return DataLoss("%s: malformed header: %s", f, e.what());
  }
  MIMO_RETURN_IF_ERROR(CheckDataAreaTiling(entries, data_base, data_size, label));
  return entries;
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` of fd (read-only, private; fd < 0: anonymous read-write) at a 2 MiB-aligned address,
// so that anonymous memory later moved over it (SafetensorsFile::EndAnonymousCopy) can keep
// transparent huge pages. MAP_FAILED on error (errno set).
void* MapAligned(size_t bytes, int fd) {
  const size_t span = bytes + kHugePage;
  void* reserve = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserve == MAP_FAILED) return MAP_FAILED;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(reserve);
  const uintptr_t at = (lo + kHugePage - 1) & ~(kHugePage - 1);
  void* p = fd >= 0 ? ::mmap(reinterpret_cast<void*>(at), bytes, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0)
                    : ::mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(reserve, span);
    errno = err;
    return MAP_FAILED;
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = (at + bytes + page - 1) & ~(page - 1);
  if (at > lo) ::munmap(reserve, at - lo);                                     // slack before
  if (lo + span > end) ::munmap(reinterpret_cast<void*>(end), lo + span - end);  // and after
  return p;
}
}  // namespace

uint8_t* SafetensorsFile::BeginAnonymousCopy() const {
  if (size_ == 0) return nullptr;
  void* p = MapAligned(size_, -1);
  if (p == MAP_FAILED) return nullptr;
  ::madvise(p, size_, MADV_HUGEPAGE);  // advice only: without THP the copy still works
  return static_cast<uint8_t*>(p);
}

bool SafetensorsFile::EndAnonymousCopy(uint8_t* copy) const {
  if (copy == nullptr) return false;
  // The copy replaces the file mapping at the same address: every pointer into the checkpoint
  // stays valid.
  void* moved = ::mremap(copy, size_, size_, MREMAP_MAYMOVE | MREMAP_FIXED,
                         const_cast<uint8_t*>(base_));
  if (moved == MAP_FAILED) {
    ::munmap(copy, size_);
    return false;
  }
  ::mprotect(moved, size_, PROT_READ);
  return true;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'%s' is not a regular file", path.c_str());
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = MapAligned(file->size_, fd);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Internal("mmap '%s' failed: %s", path.c_str(), std::strerror(err));
    }
    file->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  static const uint8_t kEmpty[1] = {0};
  auto entries = ParseSafetensorsHeader(file->base_ ? file->base_ : kEmpty, file->size_, path);
  if (!entries.ok()) return entries.status();
  file->entries_ = std::move(entries).value();
  for (size_t i = 0; i < file->entries_.size(); ++i) file->index_[file->entries_[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Status SafetensorsSet::AddFile(const std::string& path, const SafetensorsFile** out) {
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  const SafetensorsFile* f = file->get();
  for (const auto& e : f->entries()) {
    auto [it, inserted] = tensors_.emplace(e.name, SafetensorsTensor{&e, f, f->DataOf(e)});
    if (!inserted) {
      return DataLoss("tensor '%s' appears in both '%s' and '%s'", e.name.c_str(),
                      it->second.file->path().c_str(), path.c_str());
    }
  }
  files_.push_back(std::move(file).value());
  if (out) *out = f;
  return Status::Ok();
}

StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const std::string ip = index_path.string();
    std::ifstream in(ip, std::ios::binary);
    if (!in) return NotFound("cannot open '%s'", ip.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return DataLoss("%s: not a valid JSON object", ip.c_str());
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
      return DataLoss("%s: no 'weight_map' object", ip.c_str());
    std::map<std::string, const SafetensorsFile*> opened;  // file name -> file
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) {
        return DataLoss("%s: weight_map entry '%s' is not a file name", ip.c_str(),
                        it.key().c_str());
      }
      const std::string fname = it->get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "..") {
        return DataLoss("%s: weight_map entry '%s' names a bad file '%s'", ip.c_str(),
                        it.key().c_str(), fname.c_str());
      }
      if (!opened.count(fname)) {
        const fs::path fp = root / fname;
        if (!fs::exists(fp, ec)) {
          return NotFound("%s: weight_map entry '%s' points at missing file '%s'", ip.c_str(),
                          it.key().c_str(), fp.string().c_str());
        }
        const SafetensorsFile* f = nullptr;
        MIMO_RETURN_IF_ERROR(set->AddFile(fp.string(), &f));
        opened[fname] = f;
      }
      if (!opened[fname]->Find(it.key())) {
        return NotFound(
            "%s: weight_map says tensor '%s' is in '%s', but that file has no such "
            "tensor",
            ip.c_str(), it.key().c_str(), fname.c_str());
      }
    }
    if (set->files_.empty()) return DataLoss("%s: weight_map is empty", ip.c_str());
    return set;
  }
  const fs::path single = root / "model.safetensors";
  if (fs::exists(single, ec)) {
    MIMO_RETURN_IF_ERROR(set->AddFile(single.string(), nullptr));
    return set;
  }
  std::vector<std::string> paths;
  for (const auto& de : fs::directory_iterator(root, ec)) {
    if (de.path().extension() == ".safetensors") paths.push_back(de.path().string());
  }
  if (ec) return NotFound("cannot list directory '%s': %s", dir.c_str(), ec.message().c_str());
  if (paths.empty()) {
    return NotFound(
        "'%s' has no model.safetensors.index.json, model.safetensors or "
        "*.safetensors",
        dir.c_str());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) MIMO_RETURN_IF_ERROR(set->AddFile(p, nullptr));
  return set;
}

const SafetensorsTensor* SafetensorsSet::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsSet::Names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

}  // namespace mimo
