// Containers of modules, as torch.nn's: ModuleList (children "0", "1", ...,
// called by the owner's code) and Sequential (children "0", "1", ... called in
// order, each one's output the next one's input).
//
//   auto blocks = register_module("h", std::make_shared<nn::ModuleList<Block>>());
//   for (int i = 0; i < n_layer; ++i) blocks->push_back(std::make_shared<Block>(cfg));
//   for (const auto& b : *blocks) x = (*b)(x);
//
//   nn::Sequential mlp;
//   mlp.push_back(std::make_shared<nn::Linear>(C, 4 * C));
//   mlp.push_back(std::make_shared<nn::GELU>());
//   mlp.push_back(std::make_shared<nn::Linear>(4 * C, C));
//   Tensor y = mlp(x);  // (B, T, C) -> (B, T, C)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Children named "0", "1", ... like torch.nn.ModuleList; items keeps their type.
template <typename M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    KILN_CHECK(m != nullptr, "ModuleList::push_back: null module");
    register_module(std::to_string(items.size()), m);
    items.push_back(std::move(m));
  }
  size_t size() const { return items.size(); }
  bool empty() const { return items.empty(); }
  const std::shared_ptr<M>& operator[](size_t i) const {
    KILN_CHECK(i < items.size(), "ModuleList: index ", i, " out of range for ", items.size(), " modules");
    return items[i];
  }
  auto begin() const { return items.begin(); }
  auto end() const { return items.end(); }

  std::vector<std::shared_ptr<M>> items;
};

// Modules with one tensor in and one out (`Tensor forward(const Tensor&)`),
// applied in order; children named "0", "1", ... like torch.nn.Sequential, so
// its state_dict() keys match a PyTorch Sequential's.
class Sequential : public Module, public Callable<Sequential> {
 public:
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    KILN_CHECK(m != nullptr, "Sequential::push_back: null module");
    register_module(std::to_string(steps_.size()), m);
    steps_.push_back([m](const Tensor& x) { return m->forward(x); });
    return m;
  }
  size_t size() const { return steps_.size(); }
  // x through every module in turn; an empty Sequential is the identity.
  Tensor forward(const Tensor& x) const {
    Tensor y = x;
    for (const auto& step : steps_) y = step(y);
    return y;
  }

 private:
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

}  // namespace kiln::nn
