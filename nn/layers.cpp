#include "nn/layers.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, double init_std) {
  KILN_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  register_parameter("weight", weight, randn({out, in}) * init_std);
  if (with_bias) register_parameter("bias", bias, zeros({out}));
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, double init_std) : padding_idx(pad) {
  KILN_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  Tensor w = randn({num, dim}) * init_std;
  if (pad) {
    KILN_CHECK(*pad >= 0 && *pad < num, "Embedding: padding_idx ", *pad, " out of range for ", num, " embeddings");
    NoGradGuard g;
    w.select(0, *pad).zero_();
  }
  register_parameter("weight", weight, w);
}

LayerNorm::LayerNorm(int64_t dim, double eps) : eps(eps) {
  register_parameter("weight", weight, ones({dim}));
  register_parameter("bias", bias, zeros({dim}));
}

}  // namespace kiln::nn
