// peer_dots.cpp — ActiveKV's 8-bit-activation dot products (engine/matmul_q8_0.hpp for the legacy
// formats, engine/matmul_q8.hpp for the K-quants) against llama.cpp's CPU kernels (ggml-cpu's type
// traits: the activation type's from_float, the weight type's vec_dot) on the same bytes: weights
// quantised by ggml, the same fp32 activation rows (normal values with one outlier per row).
// Prints, per type, how many of the outputs have the same bits and the largest relative difference.
//
//   scripts/peer-dots.sh            (compiles this against the peer tree and the build's libraries)
//
// Built outside the project: a measurement tool, linked against the peer's libggml-cpu.
#include <ggml-cpu.h>
#include <ggml.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/matmul_q8.hpp"
#include "engine/matmul_q8_0.hpp"

using namespace activekv::engine;

namespace {

struct Pair {
  ggml_type peer;
  GgmlType ours;
};

// y = ActiveKV's product of w (rows × n) with the batch × n rows of x, on the best instruction set.
void ours(const MatrixView& w, const std::vector<float>& x, std::size_t batch, std::vector<float>& y) {
  const std::uint32_t n = w.cols;
  std::vector<std::int8_t> q(batch * n);
  if (q8_0_supported(w.type, n)) {
    std::vector<float> d(batch * n / q8_0_block), s(batch * n / q8_0_block);
    const Q8_0Rows rows{q.data(), d.data(), s.data(), n, batch};
    quantize_rows_q8_0(best_isa(), x.data(), n, rows, 0, batch);
    matmul_rows_q8_0(best_isa(), w, rows, y.data(), w.rows, 0, w.rows);
  } else {
    std::vector<float> d(batch * n / q8_block);
    std::vector<std::int16_t> sums(batch * n / q8_group);
    const Q8Rows rows{q.data(), d.data(), sums.data(), n, batch};
    quantize_rows_q8(best_isa(), x.data(), n, rows, 0, batch);
    matmul_rows_q8(best_isa(), w, rows, y.data(), w.rows, 0, w.rows);
  }
}

}  // namespace

int main() {
  ggml_cpu_init();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Pair pairs[] = {{GGML_TYPE_Q4_0, GgmlType::q4_0}, {GGML_TYPE_Q4_1, GgmlType::q4_1}, {GGML_TYPE_Q5_0, GgmlType::q5_0},
                        {GGML_TYPE_Q5_1, GgmlType::q5_1}, {GGML_TYPE_Q8_0, GgmlType::q8_0}, {GGML_TYPE_Q4_K, GgmlType::q4_k},
                        {GGML_TYPE_Q5_K, GgmlType::q5_k}, {GGML_TYPE_Q6_K, GgmlType::q6_k}};
  const std::uint32_t n = 2048, rows = 64;
  const std::size_t batch = 4;
  std::printf("isa %s; %u × %u weights, %zu activation rows\n", isa_name(best_isa()), rows, n, batch);
  for (const Pair& p : pairs) {
    std::vector<float> wf(rows * n), x(batch * n);
    for (float& v : wf) v = 0.05f * normal(rng);
    for (float& v : x) v = normal(rng);
    for (std::size_t b = 0; b < batch; ++b) x[b * n + 7 + 97 * b] = 30.0f;
    const std::size_t row_bytes = ggml_row_size(p.peer, n);
    std::vector<std::uint8_t> wq(rows * row_bytes);
    ggml_quantize_chunk(p.peer, wf.data(), wq.data(), 0, rows, n, nullptr);
    const ggml_type_traits_cpu* wt = ggml_get_type_traits_cpu(p.peer);
    const ggml_type_traits_cpu* xt = ggml_get_type_traits_cpu(wt->vec_dot_type);
    const std::size_t x_bytes = ggml_row_size(wt->vec_dot_type, n);
    std::vector<std::uint8_t> xq(batch * x_bytes);
    for (std::size_t b = 0; b < batch; ++b) xt->from_float(x.data() + b * n, xq.data() + b * x_bytes, n);
    std::vector<float> peer(batch * rows), mine(batch * rows);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::uint32_t r = 0; r < rows; ++r)
        wt->vec_dot(static_cast<int>(n), &peer[b * rows + r], 0, wq.data() + r * row_bytes, 0, xq.data() + b * x_bytes, 0, 1);
    ours(MatrixView{p.ours, wq.data(), n, rows, row_bytes}, x, batch, mine);
    std::size_t same = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < peer.size(); ++i) {
      same += std::memcmp(&peer[i], &mine[i], sizeof(float)) == 0;
      worst = std::max(worst, std::fabs(double{peer[i]} - mine[i]) / (std::fabs(double{peer[i]}) + 1e-30));
    }
    std::printf("%-5s × %-5s same bits %zu of %zu, largest relative difference %.2g\n", ggml_type_name(p.peer),
                ggml_type_name(wt->vec_dot_type), same, peer.size(), worst);
  }
  return 0;
}
