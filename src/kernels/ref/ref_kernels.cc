// Scalar reference kernels (see ref_kernels.h).
#include "kernels/ref/ref_kernels.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"

namespace mimo::ref {

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * w.cols;  // [cols]
      double acc = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(xt[c]) * w.At(r, c);
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void Linear(const float* x, int64_t T, const MatrixWeight& w, float* y) {
  LinearRows(x, T, w, 0, w.rows, y);
}

void ConvertRow(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<const float*>(src)[i];
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(static_cast<const uint16_t*>(src)[i]);
      return;
    default:
      MIMO_ABORT("ConvertRow: unsupported dtype %s", std::string(DTypeName(dtype)).c_str());
  }
}

void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  for (int64_t j = 0; j < n; ++j) {
    double s = 0.0;
    for (int64_t c = 0; c < d; ++c) s += static_cast<double>(q[c]) * k[j * d + c];
    scores[j] = static_cast<float>(s * scale);
  }
}

void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < d; ++c) acc[c] += e[j] * v[j * d + c];
  }
}

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  for (int64_t j = 0; j < n; ++j) {
    e[j] = static_cast<float>(std::exp(static_cast<double>(s[j] - m)));  // fp32 difference
  }
}

void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out) {
  std::vector<float> wf(dim);  // [dim]
  ConvertRow(weight.data, weight.dtype, dim, wf.data());
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xt[i]) * xt[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      out[t * dim + i] = static_cast<float>(static_cast<double>(xt[i]) * inv * wf[i]);
    }
  }
}

void RopeRotate(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, const float* cos,
                const float* sin) {
  const int half = rotary_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;  // [head_dim]
      for (int i = 0; i < half; ++i) {
        const float c = cos[t * half + i], s = sin[t * half + i];
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void RopeNeox(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, float theta,
              const int32_t* positions) {
  const int half = rotary_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;  // [head_dim]
      for (int i = 0; i < half; ++i) {
        const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / rotary_dim);
        const double angle = static_cast<double>(positions[t]) * inv_freq;
        const double c = std::cos(angle), s = std::sin(angle);
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void Embedding(const TensorView& table, const int32_t* ids, int64_t T, float* out) {
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(dim) * DTypeSize(table.dtype);
  for (int64_t t = 0; t < T; ++t) {
    MIMO_CHECK(ids[t] >= 0 && ids[t] < vocab, "Embedding: token id %d outside [0, %lld)", ids[t],
               static_cast<long long>(vocab));
    ConvertRow(static_cast<const char*>(table.data) + ids[t] * row_bytes, table.dtype, dim,
               out + t * dim);
  }
}

uint64_t ReadProbe(const void* p, size_t bytes) {
  const uint64_t* q = static_cast<const uint64_t*>(p);
  uint64_t a[8] = {};
  for (size_t i = 0, n = bytes / 512; i < n; ++i, q += 64) {
    for (int k = 0; k < 64; ++k) a[k % 8] += q[k];
  }
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

double FmaProbe(int64_t iters, float* sink) {
  float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t i = 0; i < iters; ++i) {
    for (float& x : a) x = x * 0.99999994f + 1e-7f;
  }
  for (float x : a) *sink += x;
  return 2.0 * 8 * static_cast<double>(iters);
}

}  // namespace mimo::ref
