// Fits y = 3x - 2 with kiln's autograd: the smallest complete use of the
// installed library. Exits non-zero if the fit is off.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>

int main() {
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::randn({256, 1});
  kiln::Tensor y = x * 3.0 - 2.0;
  kiln::Tensor w = kiln::zeros({1, 1}, kiln::TensorOptions(kiln::DType::Float32)).requires_grad_();
  kiln::Tensor b = kiln::zeros({1}).requires_grad_();
  for (int step = 0; step < 200; ++step) {
    kiln::Tensor pred = kiln::linear(x, w, b);
    kiln::Tensor loss = kiln::mean(kiln::pow(pred - y, 2.0));
    w.zero_grad();
    b.zero_grad();
    loss.backward();
    kiln::NoGradGuard no_grad;
    w.add_(w.grad(), -0.1);
    b.add_(b.grad(), -0.1);
  }
  const float wv = w.item<float>(), bv = b.item<float>();
  std::printf("fit_line: w = %.4f (3), b = %.4f (-2)\n", wv, bv);
  return std::abs(wv - 3.f) < 1e-3f && std::abs(bv + 2.f) < 1e-3f ? 0 : 1;
}
