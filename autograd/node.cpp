#include "autograd/node.h"

#include "autograd/autograd_meta.h"
#include "core/backend.h"

namespace kiln {
namespace {
std::atomic<uint64_t> g_sequence{0};
std::atomic<int> g_hook_id{0};

Tensor zeros_for(const Node::OutputMeta& m) {
  Tensor z = empty_tensor(m.sizes, m.dtype, m.device);
  backend(m.device).fill(z, 0.0);
  return z;
}
// Note [Stealing the gradient]: a leaf's first gradient becomes its .grad.
// When nothing else refers to the incoming tensor or its storage (this node
// holds the only reference: the engine moved it here, no hook or other
// branch kept it) and it is a dense tensor of the leaf's dtype and device,
// .grad takes its storage instead of a copy, as PyTorch's AccumulateGrad
// does; a gradient shared with another branch (add's backward hands the same
// tensor to both inputs) is copied, and the last holder may then take it.
// Saves a pass over every parameter's gradient each step.
bool sole_owner_of_dense_storage(const Tensor& g, const Tensor& leaf) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.dtype() == leaf.dtype() &&
         g.device() == leaf.device() && g.offset() == 0 && g.is_contiguous() &&
         g.storage()->nbytes() == static_cast<size_t>(g.numel()) * g.element_size();
}
}  // namespace

int next_hook_id() { return ++g_hook_id; }

Node::Node() : sequence_nr(g_sequence.fetch_add(1)) {}

Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next_edges)
    if (e.fn) stack.push_back(std::move(e.fn));
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {  // last owner: take its children before it dies
      for (Edge& e : n->next_edges)
        if (e.fn) stack.push_back(std::move(e.fn));
      n->next_edges.clear();
    }
  }
}

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::get() const {
  if (released_)
    fail(op_, ": trying to run backward through the graph a second time (saved tensors were freed; "
              "pass retain_graph=true to the first backward)");
  if (data_.defined() && data_.version() != version_)
    fail(op_, ": a tensor saved for backward was modified in place (version ", version_, " at save, now ",
         data_.version(), "); use an out-of-place op instead");
  return data_;
}

TensorList FunctionNode::apply(TensorList&& grads) {
  if (!fn_)
    fail(name_, ": trying to run backward through the graph a second time (saved tensors were freed; "
                "pass retain_graph=true to the first backward)");
  grads.resize(outputs.size());
  for (size_t k = 0; k < grads.size(); ++k)
    if (!grads[k].defined()) grads[k] = zeros_for(outputs[k]);
  TensorList out = fn_(grads);
  KILN_CHECK(out.size() == next_edges.size(), "internal: backward of ", name_, " returned ", out.size(),
             " gradients for ", next_edges.size(), " inputs");
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].defined() || !next_edges[i].valid()) continue;
    const Node& next = *next_edges[i].fn;
    const uint32_t slot = next_edges[i].input_nr;
    KILN_CHECK(slot < next.outputs.size() && out[i].sizes() == next.outputs[slot].sizes,
               "internal: backward of ", name_, " produced a gradient of shape ", shape_str(out[i].sizes()),
               " for input ", i, " of shape ",
               slot < next.outputs.size() ? shape_str(next.outputs[slot].sizes) : std::string("?"));
  }
  return out;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl || grads.empty() || !grads[0].defined()) return {};
  Tensor leaf(impl);
  AutogradMeta& meta = autograd_meta(leaf);
  Tensor g = std::move(grads[0]);
  for (auto& [id, hook] : meta.leaf_hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  KILN_CHECK(g.sizes() == leaf.sizes(), "AccumulateGrad: gradient of shape ", shape_str(g.sizes()),
             " for a leaf of shape ", shape_str(leaf.sizes()));
  Backend& be = backend(leaf.device());
  if (!meta.grad.defined()) {
    if (sole_owner_of_dense_storage(g, leaf)) {  // Note [Stealing the gradient]
      meta.grad = make_tensor(g.storage(), g.sizes(), g.strides(), 0, g.dtype());
    } else {
      Tensor own = empty_tensor(leaf.sizes(), leaf.dtype(), leaf.device());
      be.copy(own, g);
      meta.grad = own;
    }
  } else {
    Tensor add = g;
    if (g.dtype() != meta.grad.dtype()) {
      add = empty_tensor(g.sizes(), meta.grad.dtype(), g.device());
      be.copy(add, g);
    }
    be.binary(BinaryOp::Add, meta.grad, meta.grad, add);
    meta.grad.bump_version();
  }
  for (auto& [id, hook] : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

}  // namespace kiln
