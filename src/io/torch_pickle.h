// A strict reader for the one torch.save file MiMo's DFlash drafters ship:
// <ckpt>/dflash/mask_embedding.pt, either {"mask_token_id": int, "embedding": tensor} or a bare
// tensor. No Python: the zip archive torch.save (>= 1.6) writes is read through its central
// directory (ZIP64 records included), and data.pkl runs on a pickle machine that only builds a
// value tree. It knows the protocol-2 opcodes torch writes for these files and only these globals
// (torch._utils._rebuild_tensor_v2 / _rebuild_parameter, collections.OrderedDict and the
// BFloat16 / Half / Float storage classes); any other opcode or global is refused, never called.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mimo {

// A tensor read from a torch.save archive, copied out of its storage.
struct TorchTensor {
  DType dtype = DType::kF32;  // kBF16 | kF16 | kF32
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // contiguous row-major, little-endian, numel * DTypeSize(dtype) bytes
};

struct MaskEmbeddingFile {
  std::optional<int64_t> mask_token_id;  // absent for a bare tensor (or a dict without the key)
  TorchTensor embedding;                 // shape as saved; the caller checks it against hidden
};

// Reads a torch.save zip archive holding a dict {"mask_token_id": int, "embedding": tensor} (other
// keys ignored; an OrderedDict works the same) or a bare tensor. The tensor must be contiguous
// row-major (any storage offset) with a bf16, f16 or f32 storage; the archive's byteorder record,
// if any, must say little. Errors name the file and what is wrong: NotFound when the file cannot
// be opened, InvalidArgument for everything else (not a zip, legacy torch.save format, compressed
// or corrupt entries, unsupported pickle opcodes or globals, non-contiguous tensors, ...).
StatusOr<MaskEmbeddingFile> ReadMaskEmbeddingPt(const std::string& path);

// Same from bytes already in memory (`what` names the source in errors); used by the fuzz harness.
StatusOr<MaskEmbeddingFile> ParseMaskEmbeddingPt(std::span<const uint8_t> bytes,
                                                 const std::string& what);

}  // namespace mimo
