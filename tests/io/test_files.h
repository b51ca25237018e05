// Test helpers for tests/io: temp directories, a minimal safetensors writer (written from the
// format description: 8-byte little-endian header length, JSON header, raw data), a small MiMo
// config, and a block FP8 quantizer written from spec section 4 (scale = amax / 448 per block,
// W = fp8 * scale_inv).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mimo::testing_io {

using json = nlohmann::json;

// A fresh directory under the gtest temp dir.
inline std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "/mimo_io_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* p = mkdtemp(buf.data());
  EXPECT_NE(p, nullptr);
  return p ? std::string(p) : std::string();
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct RawTensor {
  std::string name;
  std::string dtype;  // safetensors dtype string
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serialises tensors back to back, header padded with spaces to a multiple of 8.
inline std::string SafetensorsBytes(const std::vector<RawTensor>& tensors) {
  json h = json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  std::string data;
  for (const auto& t : tensors) {
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
    data += t.bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline void WriteSafetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  WriteFile(path, SafetensorsBytes(tensors));
}

inline std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
inline std::string BF16Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = F32ToBF16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

// A row-major float matrix.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  float& at(int64_t r, int64_t c) { return v[r * cols + c]; }
  float at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

// Random values whose magnitude changes by 8x from one 128-row block to the next (shifted by
// `block_phase` blocks) and between column blocks, so any wrong scale row is visible.
inline Matrix RandomBlocky(int64_t rows, int64_t cols, uint32_t seed, int64_t block_phase = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.25f, 1.0f);
  Matrix m{rows, cols, std::vector<float>(rows * cols)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t level = (r / 128 + block_phase + c / 128) % 3;
      const float sign = (rng() & 1) ? 1.0f : -1.0f;
      m.at(r, c) = sign * u(rng) * std::ldexp(1.0f, 3 * static_cast<int>(level));
    }
  }
  return m;
}

// Block quantization of spec section 4: per (block_rows x block_cols) block, scale_inv =
// amax / 448, fp8 = e4m3(x / scale_inv). A trailing partial block just has fewer rows ("phantom"
// rows do not exist in the data).
struct Quantized {
  std::string fp8;  // [rows, cols] e4m3 bytes
  Matrix scale;     // [ceil(rows/br), ceil(cols/bc)]
};
inline Quantized QuantizeBlocks(const Matrix& m, int64_t br = 128, int64_t bc = 128) {
  Quantized q;
  q.fp8.assign(m.rows * m.cols, '\0');
  q.scale = Matrix{(m.rows + br - 1) / br, (m.cols + bc - 1) / bc, {}};
  q.scale.v.assign(q.scale.rows * q.scale.cols, 0.0f);
  for (int64_t bi = 0; bi < q.scale.rows; ++bi) {
    for (int64_t bj = 0; bj < q.scale.cols; ++bj) {
      float amax = 0.0f;
      for (int64_t r = bi * br; r < std::min(m.rows, (bi + 1) * br); ++r)
        for (int64_t c = bj * bc; c < std::min(m.cols, (bj + 1) * bc); ++c)
          amax = std::max(amax, std::fabs(m.at(r, c)));
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      q.scale.at(bi, bj) = s;
      for (int64_t r = bi * br; r < std::min(m.rows, (bi + 1) * br); ++r)
        for (int64_t c = bj * bc; c < std::min(m.cols, (bj + 1) * bc); ++c)
          q.fp8[r * m.cols + c] = static_cast<char>(F32ToF8E4M3(m.at(r, c) / s));
    }
  }
  return q;
}

// Rows [r0, r1) of m.
inline Matrix Rows(const Matrix& m, int64_t r0, int64_t r1) {
  return Matrix{r1 - r0, m.cols,
                std::vector<float>(m.v.begin() + r0 * m.cols, m.v.begin() + r1 * m.cols)};
}
inline Matrix Stack(const std::vector<Matrix>& parts) {
  Matrix out{0, parts.empty() ? 0 : parts[0].cols, {}};
  for (const auto& p : parts) {
    out.rows += p.rows;
    out.v.insert(out.v.end(), p.v.begin(), p.v.end());
  }
  return out;
}

// A small, valid MiMo-V2-style config (4 layers: full, SWA, SWA, full; layer 0 dense).
inline json TinyConfig() {
  return json::parse(R"({
    "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
    "vocab_size": 64, "hidden_size": 200, "intermediate_size": 96, "moe_intermediate_size": 32,
    "num_hidden_layers": 4, "max_position_embeddings": 4096,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 192, "v_head_dim": 128,
    "swa_num_attention_heads": 4, "swa_num_key_value_heads": 4, "swa_head_dim": 192,
    "swa_v_head_dim": 128, "rope_theta": 5000000, "swa_rope_theta": 10000,
    "partial_rotary_factor": 0.334, "layernorm_epsilon": 1e-5, "sliding_window": 128,
    "hybrid_layer_pattern": [0, 1, 1, 0], "moe_layer_freq": [0, 1, 1, 1],
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
    "routed_scaling_factor": null, "n_shared_experts": null, "norm_topk_prob": true,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "hidden_act": "silu",
    "add_swa_attention_sink_bias": true, "add_full_attention_sink_bias": false,
    "attention_value_scale": 0.707, "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128],
                            "ignored_layers": ["model.layers.0.self_attn.o_proj"]}
  })");
}

}  // namespace mimo::testing_io
