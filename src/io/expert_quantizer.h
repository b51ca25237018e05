// `mimo quantize`: rewrites the routed experts of a MiMo-V2 checkpoint (FP8 block or BF16/F16/F32)
// into V2.6's MXFP4 layout (spec section 4: `.weight` U8 [N, K/2] of E2M1 pairs, low nibble first,
// and `.weight_scale` U8 [N, K/32] of E8M0 exponents), so the loader and kernels that serve V2.6
// serve the result. Every other tensor and file is copied unchanged; config.json gets V2.6's
// `quantization_config.store_dtype: "mxfp4"` and a `quantization` note saying what was converted.
// Streams tensor by tensor: memory is one expert tensor plus its output.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/matrix_weight.h"
#include "core/status.h"

namespace mimo {

class ThreadPool;

// How a 32-element block's E8M0 exponent is chosen.
//  kMax: OCP MX's rule, 2^(floor(log2 amax) - 2): the block's largest magnitude lands in [4, 8)
//        (values above 6 are clamped to 6).
//  kMse: the exponent among kMax's - 1, kMax's and kMax's + 1 whose rounded block has the least
//        squared error (tried in the order kMax's, + 1, - 1; a later one must be strictly better),
//        each element rounded to the nearest E2M1 value (ties to the even code). + 2 is never
//        better than + 1 (its grid is a subset of + 1's over the block's range); - 1 wins only on
//        blocks of one large value among many small ones, which it clamps to represent the rest.
enum class Mxfp4ScaleRule : uint8_t { kMse, kMax };

inline constexpr int kMxfp4Block = 32;

// Squared-error bookkeeping of a quantization (sums over every element).
struct Mxfp4ErrorStats {
  double sum_sq_weight = 0;          // sum x^2
  double sum_sq_error = 0;           // sum (x - q)^2 under the rule used
  double sum_sq_error_max_rule = 0;  // the same under kMax (for comparison)
  int64_t blocks = 0;
  int64_t blocks_not_max = 0;  // blocks where kMse chose another exponent than kMax
  void Add(const Mxfp4ErrorStats& o);
};

// Rounds |y| (already divided by the block scale) to the E2M1 magnitude code 0..7: nearest of
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to the even code, above 6 clamped to code 7.
uint8_t RoundToE2M1Magnitude(double y);

// Quantizes `n` (<= 32) values: writes ceil(n / 2) packed bytes (element 2i low nibble, 2i + 1
// high) and returns the E8M0 exponent byte. Adds the block's error to *stats (may be null).
// NaN or infinite inputs are the caller's to reject.
uint8_t QuantizeMxfp4Block(const float* x, int n, Mxfp4ScaleRule rule, uint8_t* packed,
                           Mxfp4ErrorStats* stats);

// A weight (F32, BF16, F16 or FP8 with its block scales, any grid) rewritten as MXFP4 in owned
// memory: the load-time form of `mimo quantize` (--experts mxfp4 on the model-running commands).
// Rows of any length (a short last block is quantized over its own elements). Adds the error to
// *stats (may be null). An MXFP4 weight is returned as is; a NaN or infinity is an error naming
// `what` and the row.
StatusOr<MatrixWeight> QuantizeWeightToMxfp4(const MatrixWeight& w, Mxfp4ScaleRule rule,
                                             ThreadPool* pool, const std::string& what,
                                             Mxfp4ErrorStats* stats);

// The format a load-time quantization rewrites a group of weights into (--experts, --dense,
// --lm-head on the model-running commands): kKeep leaves them as stored.
enum class WeightFormat : uint8_t { kKeep, kFp8, kInt8, kMxfp4 };
// "fp8" / "int8" / "mxfp4" / "" (keep); anything else is an error naming the accepted values.
StatusOr<WeightFormat> ParseWeightFormat(const std::string& s);
const char* WeightFormatName(WeightFormat f);  // "fp8", "int8", "mxfp4", "as stored"

// The format of each group of weights a load-time quantization rewrites: the flags --experts,
// --dense and --lm-head (MimoV2Model::QuantizeWeights; mimo inspect's memory plan).
struct WeightFormats {
  WeightFormat experts = WeightFormat::kKeep, dense = WeightFormat::kKeep,
               lm_head = WeightFormat::kKeep;
  bool any() const {
    return experts != WeightFormat::kKeep || dense != WeightFormat::kKeep ||
           lm_head != WeightFormat::kKeep;
  }
  std::string Flags() const;  // "--experts mxfp4 --lm-head fp8" (the groups not kept)
};
// The three flags' values as `value_of(flag)` gives them ("experts", "dense", "lm-head"; nullopt:
// not given). A value other than fp8, int8 or mxfp4 is an error naming the flag:
// "--dense 'x' is not supported (fp8, int8 or mxfp4)".
StatusOr<WeightFormats> ParseWeightFormatFlags(
    const std::function<std::optional<std::string>(const char* flag)>& value_of);

inline constexpr int kFp8QuantBlock = 128;

// A weight (F32, BF16 or F16) rewritten as FP8 e4m3 with fp32 block scales on the uniform
// 128 x 128 grid the checkpoints use (spec section 4; vLLM's and DeepSeek's block FP8): each block's
// scale_inv is amax / 448 in fp32 (1 for an all-zero block), each element
// e4m3(x / scale_inv) rounded to nearest even (core EncodeF8E4M3), and the kernels dequantize
// code x scale_inv. Partial edge blocks are scaled over their own elements. Owned memory; adds the
// error to *stats (may be null; `blocks` counts 128 x 128 blocks, the rule fields stay 0). A weight
// already FP8 or MXFP4 (as few or fewer bits) is returned as is; a NaN or infinity is an error
// naming `what` and the row.
StatusOr<MatrixWeight> QuantizeWeightToFp8Block(const MatrixWeight& w, ThreadPool* pool,
                                                const std::string& what, Mxfp4ErrorStats* stats);

inline constexpr int kInt8Block = 32;

// A weight (F32, BF16, F16 or FP8 with its block scales) rewritten in the int8 weight format
// (DType::kInt8, llama.cpp's Q8_0 rule with a bf16 scale): per row, each 32-column block's scale is
// the smallest bf16 value at or above amax / 127 in fp32 (1 for an all-zero block; the quotient
// taken no lower than fp32's least subnormal) and each element round-to-nearest-even of x / scale,
// within [-127, 127]; a short last block is scaled over its own elements. The kernels dequantize
// code x scale. (Q8_0 rounds its fp16 scale after coding, so its codes miss the stored scale;
// rounding up first keeps every |x| / scale <= 127 against the scale used.) The int8 mode's grouped
// layout stores the scales in 16 bits, exactly. Owned memory; adds the error to *stats (may be
// null; `blocks` counts 32-element blocks). An int8 or MXFP4 weight is returned as is (FP8 is
// converted: the same bits per weight, a finer grid per block); a NaN or infinity is an error
// naming `what` and the row.
StatusOr<MatrixWeight> QuantizeWeightToInt8(const MatrixWeight& w, ThreadPool* pool,
                                            const std::string& what, Mxfp4ErrorStats* stats);

struct QuantizeOptions {
  std::string in_dir, out_dir;
  Mxfp4ScaleRule rule = Mxfp4ScaleRule::kMse;
  ThreadPool* pool = nullptr;  // may be null
  // (input bytes processed, total input bytes), after each tensor.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct QuantizeReport {
  int tensors_converted = 0;             // expert weights rewritten
  int tensors_copied = 0;                // everything else
  int tensors_kept_mxfp4 = 0;            // experts already MXFP4
  std::string converted_from;            // "F8_E4M3 with [128, 128] block scales", "BF16", ...
  uint64_t bytes_in = 0, bytes_out = 0;  // safetensors bytes
  Mxfp4ErrorStats error;
};

// The output directory must not exist or be empty, and differ from the input. Errors name the
// tensor or file at fault (an expert weight whose K is not a multiple of 32, a NaN, a missing
// weight_scale_inv, an unreadable config.json).
StatusOr<QuantizeReport> QuantizeExpertsToMxfp4(const QuantizeOptions& options);

// True for the routed experts' projection weights (main and MTP layers):
// model.[mtp.]layers.N.mlp.experts.E.{gate,up,down}_proj.weight
bool IsRoutedExpertWeight(const std::string& name);

}  // namespace mimo
