// Autograd graph: a Node is the backward of one op call. It receives the
// gradients of the op's outputs and returns the gradients of its inputs, which
// the engine (engine.cpp) routes along next_edges.
//
// Note [Saved tensors]: a node keeps what its backward needs as SavedTensor:
// a detached alias (no history, so saving an output makes no reference cycle)
// plus the storage version at save time (Note [Version counter]). Unpacking
// checks the version. After a backward without retain_graph the node drops its
// saved tensors, and running it again is an error.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

using TensorList = std::vector<Tensor>;

struct Edge {
  std::shared_ptr<Node> fn;  // null: the input needs no gradient
  uint32_t input_nr = 0;     // which gradient slot of fn this feeds
  bool valid() const { return fn != nullptr; }
};

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // The saved value; kiln::Error if it was modified in place since saving or
  // the graph was freed.
  Tensor get() const;
  void release() { data_ = Tensor(); released_ = true; }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint32_t version_ = 0;
  const char* op_ = "";
  bool released_ = false;
};

using TensorHook = std::function<Tensor(const Tensor&)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  // Releases the graph behind this node iteratively: a chain of 10^6 nodes
  // must not recurse 10^6 destructors deep.
  virtual ~Node();
  virtual std::string name() const = 0;
  // grads[k] is the gradient of output k (undefined when that output got none;
  // apply() treats it as zeros). Returns one gradient per next edge.
  virtual TensorList apply(TensorList&& grads) = 0;
  // Drops saved tensors (after a backward without retain_graph).
  virtual void release_saved() {}

  struct OutputMeta {
    Shape sizes;
    DType dtype;
    Device device;
  };
  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;  // one per forward output (shape of its gradient)
  uint64_t sequence_nr;  // creation order; the engine runs later nodes first
  // Hooks on the gradient arriving at output slot k (tensor.register_hook).
  std::map<uint32_t, std::vector<std::pair<int, TensorHook>>> pre_hooks;
};

// The backward of a differentiable op, as a function of output gradients.
using BackwardFn = std::function<TensorList(const TensorList& grads)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_saved() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// Leaf node: accumulates the incoming gradient into the leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

int next_hook_id();

}  // namespace kiln
