// Tensor's autograd surface (requires_grad, grad, backward, hooks, detach)
// and the recording of op nodes.
#include <mutex>

#include "autograd/autograd_meta.h"
#include "autograd/record.h"
#include "core/backend.h"

namespace kiln {
namespace {
std::mutex g_names_mutex;
std::set<std::string>& names() {
  static std::set<std::string> s;
  return s;
}
const Tensor kUndefined;
}  // namespace

AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (!impl.autograd) impl.autograd = std::make_shared<AutogradMeta>();
  return *impl.autograd;
}

const AutogradMeta* autograd_meta_if(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }

Edge gradient_edge(const Tensor& t) {
  const AutogradMeta* m = autograd_meta_if(t);
  if (!m) return {};
  if (m->grad_fn) return Edge{m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  AutogradMeta& mm = autograd_meta(t);
  std::shared_ptr<AccumulateGrad> acc = mm.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->outputs.push_back({t.sizes(), t.dtype(), t.device()});
    mm.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

bool any_requires_grad(const TensorList& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<bool> grad_mask(const TensorList& inputs) {
  std::vector<bool> m;
  for (const Tensor& t : inputs) m.push_back(t.defined() && t.requires_grad());
  return m;
}

void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  for (const Tensor& in : inputs) node->next_edges.push_back(in.defined() ? gradient_edge(in) : Edge{});
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& out = outputs[k];
    node->outputs.push_back({out.sizes(), out.dtype(), out.device()});
    AutogradMeta& m = autograd_meta(out);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(k);
    m.requires_grad = true;
  }
  std::lock_guard<std::mutex> g(g_names_mutex);
  names().insert(name);
}

std::set<std::string> recorded_op_names() {
  std::lock_guard<std::mutex> g(g_names_mutex);
  return names();
}

// ---- Tensor methods ------------------------------------------------------

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd_meta_if(*this);
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::set_requires_grad(bool r) {
  const AutogradMeta* m = autograd_meta_if(*this);
  KILN_CHECK(!(m && m->grad_fn), "requires_grad_: can only change requires_grad of leaf tensors (this one was made by ",
             m ? m->grad_fn->name() : std::string(), "); use detach()");
  KILN_CHECK(!r || is_floating_point(), "requires_grad_: only floating-point tensors can require grad, got ",
             dtype_name(dtype()));
  autograd_meta(*this).requires_grad = r;
  return *this;
}

const Tensor& Tensor::grad() const {
  const AutogradMeta* m = autograd_meta_if(*this);
  return m ? m->grad : kUndefined;
}

Tensor& Tensor::mutable_grad() { return autograd_meta(*this).grad; }

void Tensor::zero_grad() {
  if (AutogradMeta* m = impl().autograd.get()) m->grad = Tensor();
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  const AutogradMeta* m = autograd_meta_if(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::retain_grad() const {
  KILN_CHECK(requires_grad(), "retain_grad: tensor does not require grad");
  AutogradMeta& m = autograd_meta(*this);
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep .grad anyway
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  m.grad_fn->pre_hooks[m.output_nr].emplace_back(next_hook_id(), [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& mm = autograd_meta(Tensor(impl));
      Tensor own = empty_tensor(g.sizes(), g.dtype(), g.device());
      backend(g.device()).copy(own, g);
      if (mm.grad.defined()) backend(g.device()).binary(BinaryOp::Add, mm.grad, mm.grad, own);
      else mm.grad = own;
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  KILN_CHECK(requires_grad(), "backward: tensor does not require grad and has no grad_fn");
  Tensor g = gradient;
  if (!g.defined()) {
    KILN_CHECK(numel() == 1, "backward: grad can be implicitly created only for one-element outputs, got shape ",
               shape_str(sizes()));
    g = empty_tensor(sizes(), dtype(), device());
    backend(device()).fill(g, 1.0);
  }
  run_backward({*this}, {g}, retain_graph);
}

int Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) const {
  KILN_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that does not require grad");
  const int id = next_hook_id();
  AutogradMeta& m = autograd_meta(*this);
  if (m.grad_fn) m.grad_fn->pre_hooks[m.output_nr].emplace_back(id, std::move(fn));
  else m.leaf_hooks.emplace_back(id, std::move(fn));
  return id;
}

void Tensor::remove_hook(int handle) const {
  AutogradMeta& m = autograd_meta(*this);
  auto drop = [handle](auto& v) {
    std::erase_if(v, [handle](const auto& p) { return p.first == handle; });
  };
  drop(m.leaf_hooks);
  drop(m.post_accumulate_hooks);
  if (m.grad_fn)
    for (auto& [slot, hooks] : m.grad_fn->pre_hooks) drop(hooks);
}

int Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  KILN_CHECK(is_leaf() && requires_grad(),
             "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate gradients");
  const int id = next_hook_id();
  autograd_meta(*this).post_accumulate_hooks.emplace_back(id, std::move(fn));
  return id;
}

Tensor Tensor::detach() const {
  Tensor d = make_tensor(storage(), sizes(), strides(), offset(), dtype());
  d.impl().is_view = true;
  return d;
}

}  // namespace kiln
