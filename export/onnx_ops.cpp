// THE table: how each traced kiln op (core/op_scope.h names) becomes ONNX
// nodes, and the ops that cannot be exported, with the reason. An op in
// neither is an error naming it at export time, and tests/test_onnx_export.cpp
// fails when the op registry (ops/op_registry.h) lists an op that is in
// neither, so a new op cannot be forgotten.
//
// Exporters write opsets kMinOpset..kMaxOpset (14..17). Dtypes: ONNX binary
// ops want equal input types, so inputs are cast to the dtype kiln's result
// has (its promotion), which is what kiln computes in.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "export/onnx_writer.h"
#include "ops/decoder_ops.h"

namespace kiln::onnx_export {
namespace {

using Ctx = NodeContext;

int64_t wrap(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

// Input i cast to the dtype of output 0.
std::string in_as_out(Ctx& c, size_t i) { return c.cast(c.in(i), c.in_dtype(i), c.out_dtype(0)); }

void unary(Ctx& c, const char* op) { c.emit_out(0, op, {in_as_out(c, 0)}); }

// Arithmetic into output 0. ONNX's arithmetic takes no bool: a bool result
// (kiln's add/mul of two masks) is computed in int64 and cast back, nonzero
// being true, as kiln's bool result is.
void arith(Ctx& c, const char* op, std::string a, std::string b) {
  if (c.out_dtype(0) != DType::Bool) return c.emit_out(0, op, {a, b});
  a = c.cast(a, DType::Bool, DType::Int64);
  b = c.cast(b, DType::Bool, DType::Int64);
  c.emit_out(0, "Cast", {c.emit1(op, {a, b})}, {{"to", int64_t{onnx_dtype(DType::Bool)}}});
}
void binary(Ctx& c, const char* op) { arith(c, op, in_as_out(c, 0), in_as_out(c, 1)); }

// add/sub: a (+/-) alpha * b.
void add_sub(Ctx& c, const char* op) {
  std::string b = in_as_out(c, 1);
  const double alpha = c.has_attr("alpha") ? c.f("alpha") : 1.0;
  if (alpha != 1.0) b = c.emit1("Mul", {b, c.const_scalar(alpha, c.out_dtype(0))});
  arith(c, op, in_as_out(c, 0), b);
}

// Comparisons in the promoted dtype of the two inputs; ne is Not(Equal).
void compare(Ctx& c, const char* op, bool negate = false) {
  const DType t = promote_types(c.in_dtype(0), c.in_dtype(1));
  const std::vector<std::string> in{c.cast(c.in(0), c.in_dtype(0), t), c.cast(c.in(1), c.in_dtype(1), t)};
  if (negate)
    c.emit_out(0, "Not", {c.emit1(op, in)});
  else
    c.emit_out(0, op, in);
}

std::string as_bool(Ctx& c, size_t i) { return c.cast(c.in(i), c.in_dtype(i), DType::Bool); }

// GELU of x (dtype t): exact through Erf (the Gelu op is opset 20), or the
// tanh approximation, as ops/ops.h defines them; written into `out`.
void gelu_into(Ctx& c, const std::string& x, DType t, const std::string& approximate, const std::string& out) {
  auto k = [&](double v) { return c.const_scalar(v, t); };
  std::string inner;
  if (approximate == "none") {
    inner = c.emit1("Erf", {c.emit1("Mul", {x, k(M_SQRT1_2)})});
  } else if (approximate == "tanh") {
    const std::string x3 = c.emit1("Mul", {c.emit1("Mul", {x, x}), x});
    const std::string u = c.emit1("Add", {x, c.emit1("Mul", {x3, k(0.044715)})});
    inner = c.emit1("Tanh", {c.emit1("Mul", {u, k(std::sqrt(2.0 / M_PI))})});
  } else {
    c.refuse("unknown approximate '" + approximate + "'");
  }
  const std::string half_x = c.emit1("Mul", {x, k(0.5)});
  c.emit("Mul", {half_x, c.emit1("Add", {inner, k(1.0)})}, {out});
}

void dropout_check(Ctx& c) {
  if (c.i("training") != 0 && c.f("p") != 0.0)
    c.refuse("dropout in training mode draws random masks; export the model in eval() mode");
}

// x @ weight^T (+ bias), in the output's dtype, written into `out`.
std::string linear_into(Ctx& c, const std::string& out) {
  const std::string wt = c.emit1("Transpose", {in_as_out(c, 1)}, {{"perm", std::vector<int64_t>{1, 0}}});
  if (!c.has_input(2)) return c.emit("MatMul", {in_as_out(c, 0), wt}, {out})[0];
  return c.emit("Add", {c.emit1("MatMul", {in_as_out(c, 0), wt}), in_as_out(c, 2)}, {out})[0];
}

// Reductions with axes as an attribute in opsets <= 17 (ReduceMean, ReduceMax, ReduceMin).
void reduce_attr_axes(Ctx& c, const char* op, const std::string& x, const std::vector<int64_t>& dims, bool keepdim,
                      const std::string& out) {
  OnnxAttrs a{{"keepdims", int64_t{keepdim}}};
  if (!dims.empty()) a.push_back({"axes", dims});  // none: all axes
  c.emit(op, {x}, {out}, a);
}

// ReduceSum: axes as an input (opset 13+); none: all axes.
std::string reduce_sum(Ctx& c, const std::string& x, const std::vector<int64_t>& dims, bool keepdim,
                       const std::string& out = "") {
  std::vector<std::string> in{x};
  if (!dims.empty()) in.push_back(c.const_ints(dims));
  const std::string o = out.empty() ? c.fresh() : out;
  c.emit("ReduceSum", in, {o}, {{"keepdims", int64_t{keepdim}}});
  return o;
}

// Reshape to the traced output shape (computed where it is dynamic). allowzero:
// a 0 in the shape is a 0, not "copy this dimension".
void reshape_to_out(Ctx& c) {
  c.emit_out(0, "Reshape", {c.in(0), c.out_shape_tensor(0)}, {{"allowzero", int64_t{1}}});
}

// A 0-dim tensor of dtype t from a 1-element int64 tensor.
std::string scalar_of(Ctx& c, const std::string& one, DType t) {
  const std::string s = c.emit1("Reshape", {one, c.const_ints({})});
  return c.cast(s, DType::Int64, t);
}

// Scaled dot-product attention of (B, T, C) q against (B, S, C) k, v (ops/fused.h).
void attention(Ctx& c, const std::string& q, const std::string& k, const std::string& v, int64_t C,
               size_t mask_input) {
  const int64_t heads = c.i("heads");
  if (c.i("training") != 0 && c.f("p") != 0.0)
    c.refuse("attention dropout in training mode draws random masks; export the model in eval() mode");
  if (heads <= 0 || C % heads != 0) c.refuse("hidden size is not a multiple of heads");
  const int64_t hs = C / heads;
  const DType t = c.out_dtype(0);
  const std::string split_shape = c.const_ints({0, 0, heads, hs});  // 0: keep B and T
  auto heads_of = [&](const std::string& x, std::vector<int64_t> perm) {
    return c.emit1("Transpose", {c.emit1("Reshape", {x, split_shape})}, {{"perm", perm}});
  };
  const std::string qh = heads_of(q, {0, 2, 1, 3}), kt = heads_of(k, {0, 2, 3, 1}), vh = heads_of(v, {0, 2, 1, 3});
  std::string scores = c.emit1("Mul", {c.emit1("MatMul", {qh, kt}), c.const_scalar(1.0 / std::sqrt(double(hs)), t)});
  if (c.has_input(mask_input))
    scores = c.emit1("Add", {scores, c.cast(c.in(mask_input), c.in_dtype(mask_input), t)});
  if (c.i("causal") != 0) {
    // keep s <= t + (S - T): the lower triangle of (T, S) shifted by S - T.
    const std::string shape = c.emit1("Shape", {scores});
    const std::string ts = c.emit1("Slice", {shape, c.const_ints({2}), c.const_ints({4})});
    const std::string T = c.emit1("Gather", {shape, c.const_ints({2})}), S = c.emit1("Gather", {shape, c.const_ints({3})});
    const std::string diag = c.emit1("Reshape", {c.emit1("Sub", {S, T}), c.const_ints({})});
    const std::string ones = c.emit1("Expand", {c.const_scalar(1, DType::Int64), ts});
    const std::string keep = c.emit1("Cast", {c.emit1("Trilu", {ones, diag}, {{"upper", int64_t{0}}})},
                                     {{"to", int64_t{onnx_dtype(DType::Bool)}}});
    scores = c.emit1("Where", {keep, scores, c.const_scalar(-std::numeric_limits<double>::infinity(), t)});
  }
  const std::string probs = c.emit1("Softmax", {scores}, {{"axis", int64_t{-1}}});
  const std::string o = c.emit1("Transpose", {c.emit1("MatMul", {probs, vh})}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  c.emit_out(0, "Reshape", {o, c.const_ints({0, 0, C})});
}

// Softmax / LogSoftmax over `dim`, computed in the output dtype.
void softmax_like(Ctx& c, const char* op) {
  c.emit_out(0, op, {in_as_out(c, 0)}, {{"axis", c.i("dim")}});
}

void layer_norm(Ctx& c) {
  const std::vector<int64_t> ns = c.ints("normalized_shape");
  const int64_t k = static_cast<int64_t>(ns.size());
  const DType t = c.out_dtype(0);
  const double eps = c.f("eps");
  const std::string x = in_as_out(c, 0);
  std::string w = c.has_input(1) ? in_as_out(c, 1) : c.emit1("Expand", {c.const_scalar(1, t), c.const_ints(ns)});
  if (c.opset() >= 17) {
    std::vector<std::string> in{x, w};
    if (c.has_input(2)) in.push_back(in_as_out(c, 2));
    c.emit("LayerNormalization", in, {c.out(0)}, {{"axis", -k}, {"epsilon", eps}});
    return;
  }
  // Opsets 14-16: the composition (LayerNormalization is opset 17).
  std::vector<int64_t> axes;
  for (int64_t i = -k; i < 0; ++i) axes.push_back(i);
  const std::string mu = c.fresh(), var = c.fresh();
  reduce_attr_axes(c, "ReduceMean", x, axes, true, mu);
  const std::string d = c.emit1("Sub", {x, mu});
  reduce_attr_axes(c, "ReduceMean", c.emit1("Mul", {d, d}), axes, true, var);
  const std::string norm = c.emit1("Div", {d, c.emit1("Sqrt", {c.emit1("Add", {var, c.const_scalar(eps, t)})})});
  const std::string y = c.emit1("Mul", {norm, w});
  if (c.has_input(2))
    c.emit_out(0, "Add", {y, in_as_out(c, 2)});
  else
    c.emit_out(0, "Identity", {y});
}

// rms_norm (ops/decoder_ops.h): the statistic in float32 (float64 for float64
// x), the normalised value cast back to x's dtype, then the weight's product
// in the output's dtype.
void rms_norm(Ctx& c) {
  const DType xt = c.in_dtype(0), t = c.out_dtype(0);
  const DType st = xt == DType::Float64 ? DType::Float64 : DType::Float32;
  const std::string x = c.cast(c.in(0), xt, st), ms = c.fresh();
  reduce_attr_axes(c, "ReduceMean", c.emit1("Mul", {x, x}), {-1}, true, ms);
  const std::string rs = c.emit1("Reciprocal", {c.emit1("Sqrt", {c.emit1("Add", {ms, c.const_scalar(c.f("eps"), st)})})});
  const std::string normed = c.cast(c.cast(c.emit1("Mul", {x, rs}), st, xt), xt, t);
  if (c.has_input(1))
    c.emit_out(0, "Mul", {in_as_out(c, 1), normed});
  else
    c.emit_out(0, "Identity", {normed});
}

// rotary_embedding (ops/decoder_ops.h): x (B, T, heads * D) as (B, T, heads, D),
// y = x * cos + cat(-x2, x1) * sin with cos, sin (T, D) broadcast as (1, T, 1, D).
void rotary(Ctx& c) {
  const int64_t heads = c.i("heads"), D = c.in_shape(1).back(), h = D / 2;
  const std::string x = c.emit1("Reshape", {in_as_out(c, 0), c.const_ints({0, 0, heads, D})});
  auto half = [&](int64_t lo, int64_t hi) {
    return c.emit1("Slice", {x, c.const_ints({lo}), c.const_ints({hi}), c.const_ints({3})});
  };
  const std::string rot = c.emit1("Concat", {c.emit1("Neg", {half(h, D)}), half(0, h)}, {{"axis", int64_t{3}}});
  auto table = [&](size_t i) { return c.emit1("Unsqueeze", {in_as_out(c, i), c.const_ints({0, 2})}); };
  const std::string y = c.emit1("Add", {c.emit1("Mul", {x, table(1)}), c.emit1("Mul", {rot, table(2)})});
  c.emit_out(0, "Reshape", {y, c.const_ints({0, 0, heads * D})});
}

// gated_activation (ops/decoder_ops.h): act(a) * b, act by its canonical name.
void gated(Ctx& c) {
  const std::string& act = gated_activation_canonical(c.s("activation"));
  const DType t = c.out_dtype(0);
  const std::string a = in_as_out(c, 0);
  std::string y;
  if (act == "silu") {
    y = c.emit1("Mul", {a, c.emit1("Sigmoid", {a})});
  } else {
    y = c.fresh();
    gelu_into(c, a, t, act == "gelu" ? "none" : "tanh", y);
  }
  c.emit_out(0, "Mul", {y, in_as_out(c, 1)});
}

// split / chunk: one Split into every output, sizes from the traced outputs.
void split_like(Ctx& c) {
  const int64_t dim = wrap(c.i("dim"), c.in_rank(0));
  std::vector<std::string> sizes, outs;
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    sizes.push_back(c.out_dim_tensor(i, dim));
    outs.push_back(c.out(i));
  }
  c.emit("Split", {c.in(0), c.emit1("Concat", sizes, {{"axis", int64_t{0}}})}, outs, {{"axis", dim}});
}

void scatter(Ctx& c, const char* reduction) {
  // scatter(x, dim, index, value) records the value as an attribute: expanded to the index's shape.
  std::string src = c.num_inputs() == 2 ? c.const_scalar(c.f("value"), c.out_dtype(0)) : in_as_out(c, 2);
  if (c.num_inputs() == 2 || c.in_rank(2) == 0) src = c.emit1("Expand", {src, c.emit1("Shape", {c.in(1)})});
  OnnxAttrs a{{"axis", c.i("dim")}};
  if (reduction) {
    if (c.opset() < 16) c.refuse("ScatterElements with reduction needs opset 16 or later");
    a.push_back({"reduction", std::string(reduction)});
  }
  c.emit_out(0, "ScatterElements", {in_as_out(c, 0), c.in(1), src}, a);
}

// full/empty: a 0-dim value expanded to the (possibly dynamic) output shape.
void fill(Ctx& c, double value) {
  c.emit_out(0, "Expand", {c.const_scalar(value, c.out_dtype(0)), c.out_shape_tensor(0)});
}

const std::map<std::string, OpExporter> kTable = {
    // factories
    {"full", [](Ctx& c) { fill(c, c.f("value")); }},
    {"empty", [](Ctx& c) { fill(c, 0.0); }},  // contents unspecified; zeros are one choice
    {"arange",
     [](Ctx& c) {
       // A bound that varies with the input sizes (arange(T)) is computed; the others are constants.
       const DType t = c.out_dtype(0);
       auto bound = [&](const char* name) {
         return c.is_dynamic(name) ? scalar_of(c, c.int_tensor(name), t) : c.const_scalar(c.f(name), t);
       };
       c.emit_out(0, "Range", {bound("start"), bound("end"), bound("step")});
     }},
    {"causal_mask",
     [](Ctx& c) {
       const std::string ones = c.emit1("Expand", {c.const_scalar(1, DType::Int64), c.out_shape_tensor(0)});
       const std::string keep = c.emit1("Cast", {c.emit1("Trilu", {ones}, {{"upper", int64_t{0}}})},
                                        {{"to", int64_t{onnx_dtype(DType::Bool)}}});
       const DType t = c.out_dtype(0);
       if (t == DType::Bool) return c.emit_out(0, "Identity", {keep});
       const double lowest = t == DType::Float64 ? std::numeric_limits<double>::lowest()
                                                 : static_cast<double>(std::numeric_limits<float>::lowest());
       c.emit_out(0, "Where", {keep, c.const_scalar(0, t), c.const_scalar(lowest, t)});
     }},
    // elementwise
    {"add", [](Ctx& c) { add_sub(c, "Add"); }},
    {"sub", [](Ctx& c) { add_sub(c, "Sub"); }},
    {"mul", [](Ctx& c) { binary(c, "Mul"); }},
    {"div", [](Ctx& c) { binary(c, "Div"); }},
    {"maximum", [](Ctx& c) { binary(c, "Max"); }},
    {"minimum", [](Ctx& c) { binary(c, "Min"); }},
    {"pow",
     [](Ctx& c) {
       if (c.num_inputs() == 2) return binary(c, "Pow");
       c.emit_out(0, "Pow", {in_as_out(c, 0), c.const_scalar(c.f("exponent"), c.out_dtype(0))});
     }},
    {"neg", [](Ctx& c) { unary(c, "Neg"); }},
    {"exp", [](Ctx& c) { unary(c, "Exp"); }},
    {"log", [](Ctx& c) { unary(c, "Log"); }},
    {"sqrt", [](Ctx& c) { unary(c, "Sqrt"); }},
    {"rsqrt", [](Ctx& c) { c.emit_out(0, "Reciprocal", {c.emit1("Sqrt", {in_as_out(c, 0)})}); }},
    {"tanh", [](Ctx& c) { unary(c, "Tanh"); }},
    {"erf", [](Ctx& c) { unary(c, "Erf"); }},
    {"sigmoid", [](Ctx& c) { unary(c, "Sigmoid"); }},
    {"relu", [](Ctx& c) { unary(c, "Relu"); }},
    {"abs", [](Ctx& c) { unary(c, "Abs"); }},
    {"gelu",
     [](Ctx& c) {
       gelu_into(c, in_as_out(c, 0), c.out_dtype(0), c.has_attr("approximate") ? c.s("approximate") : "none", c.out(0));
     }},
    {"logical_not", [](Ctx& c) { c.emit_out(0, "Not", {as_bool(c, 0)}); }},
    {"where", [](Ctx& c) { c.emit_out(0, "Where", {as_bool(c, 0), in_as_out(c, 1), in_as_out(c, 2)}); }},
    {"masked_fill", [](Ctx& c) { c.emit_out(0, "Where", {as_bool(c, 1), in_as_out(c, 2), in_as_out(c, 0)}); }},
    {"clamp",
     [](Ctx& c) {
       const DType t = c.out_dtype(0);
       c.emit_out(0, "Clip", {in_as_out(c, 0), c.has_attr("min") ? c.const_scalar(c.f("min"), t) : "",
                              c.has_attr("max") ? c.const_scalar(c.f("max"), t) : ""});
     }},
    {"eq", [](Ctx& c) { compare(c, "Equal"); }},
    {"ne", [](Ctx& c) { compare(c, "Equal", true); }},
    {"lt", [](Ctx& c) { compare(c, "Less"); }},
    {"le", [](Ctx& c) { compare(c, "LessOrEqual"); }},
    {"gt", [](Ctx& c) { compare(c, "Greater"); }},
    {"ge", [](Ctx& c) { compare(c, "GreaterOrEqual"); }},
    // reductions
    {"sum", [](Ctx& c) { reduce_sum(c, in_as_out(c, 0), c.ints("dims"), c.i("keepdim") != 0, c.out(0)); }},
    {"mean",
     [](Ctx& c) { reduce_attr_axes(c, "ReduceMean", in_as_out(c, 0), c.ints("dims"), c.i("keepdim") != 0, c.out(0)); }},
    {"amax",
     [](Ctx& c) { reduce_attr_axes(c, "ReduceMax", c.in(0), c.ints("dims"), c.i("keepdim") != 0, c.out(0)); }},
    {"amin",
     [](Ctx& c) { reduce_attr_axes(c, "ReduceMin", c.in(0), c.ints("dims"), c.i("keepdim") != 0, c.out(0)); }},
    {"max",
     [](Ctx& c) {
       if (!c.has_attr("dim")) return reduce_attr_axes(c, "ReduceMax", c.in(0), {}, false, c.out(0));
       const int64_t dim = c.i("dim"), keep = c.i("keepdim");
       reduce_attr_axes(c, "ReduceMax", c.in(0), {dim}, keep != 0, c.out(0));
       if (c.num_outputs() > 1) c.emit_out(1, "ArgMax", {c.in(0)}, {{"axis", dim}, {"keepdims", keep}});
     }},
    {"argmax",
     [](Ctx& c) {
       if (!c.has_attr("dim"))  // over the flattened tensor
         return c.emit_out(0, "ArgMax", {c.emit1("Reshape", {c.in(0), c.const_ints({-1})})},
                           {{"axis", int64_t{0}}, {"keepdims", int64_t{0}}});
       c.emit_out(0, "ArgMax", {c.in(0)}, {{"axis", c.i("dim")}, {"keepdims", c.i("keepdim")}});
     }},
    {"var",
     [](Ctx& c) {
       // sum((x - mean)^2) / (N - correction), N = elements reduced (Size(x) / Size(result)).
       const std::vector<int64_t> dims = c.ints("dims");
       const DType t = c.out_dtype(0);
       const std::string x = in_as_out(c, 0), mu = c.fresh();
       reduce_attr_axes(c, "ReduceMean", x, dims, true, mu);
       const std::string d = c.emit1("Sub", {x, mu});
       const std::string ss = reduce_sum(c, c.emit1("Mul", {d, d}), dims, c.i("keepdim") != 0);
       const std::string n = c.emit1("Div", {c.emit1("Size", {x}), c.emit1("Size", {ss})});
       const std::string denom = c.emit1("Sub", {c.cast(n, DType::Int64, t), c.const_scalar(double(c.i("correction")), t)});
       c.emit_out(0, "Div", {ss, denom});
     }},
    // views and copies: the traced output shape says what the view made
    {"view", reshape_to_out},
    {"reshape", reshape_to_out},
    {"flatten", reshape_to_out},
    {"squeeze", reshape_to_out},
    {"unsqueeze", reshape_to_out},
    {"expand", [](Ctx& c) { c.emit_out(0, "Expand", {c.in(0), c.out_shape_tensor(0)}); }},
    {"permute",
     [](Ctx& c) {
       std::vector<int64_t> perm = c.ints("dims");
       for (int64_t& d : perm) d = wrap(d, c.in_rank(0));
       c.emit_out(0, "Transpose", {c.in(0)}, {{"perm", perm}});
     }},
    {"transpose",
     [](Ctx& c) {
       const int64_t r = c.in_rank(0);
       std::vector<int64_t> perm(static_cast<size_t>(r));
       for (int64_t i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
       std::swap(perm[static_cast<size_t>(wrap(c.i("d0"), r))], perm[static_cast<size_t>(wrap(c.i("d1"), r))]);
       c.emit_out(0, "Transpose", {c.in(0)}, {{"perm", perm}});
     }},
    {"narrow",
     [](Ctx& c) {
       const std::string start = c.int_tensor("start");
       c.emit_out(0, "Slice", {c.in(0), start, c.emit1("Add", {start, c.int_tensor("length")}), c.const_ints({c.i("dim")})});
     }},
    {"slice",
     [](Ctx& c) {
       c.emit_out(0, "Slice", {c.in(0), c.int_tensor("start"), c.int_tensor("end"), c.const_ints({c.i("dim")}),
                               c.has_attr("step") ? c.int_tensor("step") : c.const_ints({1})});
     }},
    {"select",
     [](Ctx& c) {
       // Gather with a 1-element index keeps the dimension; the Reshape drops it.
       const std::string g = c.emit1("Gather", {c.in(0), c.int_tensor("index")}, {{"axis", c.i("dim")}});
       c.emit_out(0, "Reshape", {g, c.out_shape_tensor(0)}, {{"allowzero", int64_t{1}}});
     }},
    {"contiguous", [](Ctx& c) { c.emit_out(0, "Identity", {c.in(0)}); }},
    {"clone", [](Ctx& c) { c.emit_out(0, "Identity", {c.in(0)}); }},
    {"to_device", [](Ctx& c) { c.emit_out(0, "Identity", {c.in(0)}); }},  // ONNX has no devices
    {"to_dtype", [](Ctx& c) { c.emit_out(0, "Identity", {in_as_out(c, 0)}); }},
    // linear algebra
    {"matmul", [](Ctx& c) { binary(c, "MatMul"); }},
    {"linear", [](Ctx& c) { linear_into(c, c.out(0)); }},
    {"linear_fused", [](Ctx& c) { linear_into(c, c.out(0)); }},
    {"linear_gelu",
     [](Ctx& c) {
       const std::string y = linear_into(c, c.fresh());
       gelu_into(c, y, c.out_dtype(0), c.has_attr("approximate") ? c.s("approximate") : "none", c.out(0));
     }},
    // nn
    {"softmax", [](Ctx& c) { softmax_like(c, "Softmax"); }},
    {"log_softmax", [](Ctx& c) { softmax_like(c, "LogSoftmax"); }},
    {"softmax_dtype", [](Ctx& c) { softmax_like(c, "Softmax"); }},
    {"log_softmax_dtype", [](Ctx& c) { softmax_like(c, "LogSoftmax"); }},
    {"scaled_masked_softmax",
     [](Ctx& c) {
       std::string s = c.emit1("Mul", {in_as_out(c, 0), c.const_scalar(c.f("scale"), c.out_dtype(0))});
       if (c.has_input(1)) s = c.emit1("Add", {s, in_as_out(c, 1)});  // an additive mask, as the composition adds it
       c.emit_out(0, "Softmax", {s}, {{"axis", int64_t{-1}}});
     }},
    {"layer_norm", layer_norm},
    {"embedding", [](Ctx& c) { c.emit_out(0, "Gather", {c.in(0), c.in(1)}, {{"axis", int64_t{0}}}); }},
    {"dropout",
     [](Ctx& c) {
       dropout_check(c);
       c.emit_out(0, "Identity", {c.in(0)});
     }},
    {"dropout_add",
     [](Ctx& c) {
       dropout_check(c);
       if (c.has_input(1))
         binary(c, "Add");
       else
         c.emit_out(0, "Identity", {c.in(0)});
     }},
    // shape ops
    {"cat",
     [](Ctx& c) {
       std::vector<std::string> in;
       for (size_t i = 0; i < c.num_inputs(); ++i) in.push_back(in_as_out(c, i));
       c.emit_out(0, "Concat", in, {{"axis", c.i("dim")}});
     }},
    {"stack",
     [](Ctx& c) {
       const int64_t dim = wrap(c.i("dim"), c.in_rank(0) + 1);
       std::vector<std::string> in;
       for (size_t i = 0; i < c.num_inputs(); ++i) in.push_back(c.emit1("Unsqueeze", {in_as_out(c, i), c.const_ints({dim})}));
       c.emit_out(0, "Concat", in, {{"axis", dim}});
     }},
    {"split", split_like},
    {"chunk", split_like},
    {"index_select", [](Ctx& c) { c.emit_out(0, "Gather", {c.in(0), c.in(1)}, {{"axis", c.i("dim")}}); }},
    {"gather", [](Ctx& c) { c.emit_out(0, "GatherElements", {c.in(0), c.in(1)}, {{"axis", c.i("dim")}}); }},
    {"scatter", [](Ctx& c) { scatter(c, nullptr); }},
    {"scatter_add", [](Ctx& c) { scatter(c, "add"); }},
    {"topk",
     [](Ctx& c) {
       c.emit("TopK", {c.in(0), c.int_tensor("k")}, {c.out(0), c.out(1)},
              {{"axis", c.i("dim")}, {"largest", c.i("largest")}, {"sorted", int64_t{1}}});  // kiln's are sorted
     }},
    {"cumsum",
     [](Ctx& c) { c.emit_out(0, "CumSum", {in_as_out(c, 0), c.emit1("Reshape", {c.const_ints({c.i("dim")}), c.const_ints({})})}); }},
    {"tril",
     [](Ctx& c) {
       c.emit_out(0, "Trilu", {c.in(0), scalar_of(c, c.int_tensor("diagonal"), DType::Int64)}, {{"upper", int64_t{0}}});
     }},
    {"triu",
     [](Ctx& c) {
       c.emit_out(0, "Trilu", {c.in(0), scalar_of(c, c.int_tensor("diagonal"), DType::Int64)}, {{"upper", int64_t{1}}});
     }},
    // fused (ops/fused.h)
    {"multi_head_attention",
     [](Ctx& c) { attention(c, c.in(0), c.in(1), c.in(2), c.in_shape(0).back(), 3); }},
    {"multi_head_attention_qkv",
     [](Ctx& c) {
       const int64_t C = c.in_shape(0).back() / 3;
       const std::string q = c.fresh(), k = c.fresh(), v = c.fresh();
       c.emit("Split", {c.in(0), c.const_ints({C, C, C})}, {q, k, v}, {{"axis", int64_t{-1}}});
       attention(c, q, k, v, C, 1);
     }},
    // decoder ops (ops/decoder_ops.h)
    {"rms_norm", rms_norm},
    {"rotary_embedding", rotary},
    {"gated_activation", gated},
};

const std::map<std::string, std::string> kRefused = {
    {"rand", "random numbers: ONNX's random ops draw other numbers than kiln's generators"},
    {"randn", "random numbers: ONNX's random ops draw other numbers than kiln's generators"},
    {"randint", "random numbers: ONNX's random ops draw other numbers than kiln's generators"},
    {"bernoulli", "random numbers: ONNX's random ops draw other numbers than kiln's generators"},
    {"multinomial", "random sampling: ONNX's Multinomial draws other samples than kiln's generators"},
    {"sort", "ONNX has no sort; TopK does not promise kiln's stable order of equal elements"},
    {"argsort", "ONNX has no sort; TopK does not promise kiln's stable order of equal elements"},
    {"cross_entropy", "a training loss; export the logits and compute losses outside the model"},
    {"mse_loss", "a training loss; export the predictions and compute losses outside the model"},
    {"binary_cross_entropy_with_logits", "a training loss; export the logits and compute losses outside the model"},
    // Tensor's in-place methods: the write may go through a view to its base
    // (or be seen through other views), which a graph of values cannot follow.
    {"fill_", "an in-place write; use full()/where() to make a new tensor instead"},
    {"copy_", "an in-place write; use the source tensor (or expand/to_dtype it) instead"},
    {"add_", "an in-place write; use add() instead"},
    {"mul_", "an in-place write; use mul() instead"},
    {"masked_fill_", "an in-place write; use masked_fill() instead"},
    // The optimizers' multi-tensor ops (ops/multi_tensor.h): training steps, not a model's forward.
    {"multi_tensor_adamw_", "an in-place optimizer step over parameters and their moment buffers; not part of a model"},
    {"multi_tensor_lamb_", "an in-place optimizer step over parameters and their moment buffers; not part of a model"},
    {"multi_tensor_norm", "a norm over a list of gradients for clipping, taken in training; not part of a model"},
    {"multi_tensor_all_finite", "the grad scaler's check of a list of gradients in training; not part of a model"},
};

}  // namespace

const std::map<std::string, OpExporter>& onnx_op_table() { return kTable; }

std::map<std::string, std::string> unexportable_ops() { return kRefused; }

const std::map<std::string, std::vector<std::string>>& registry_aliases() {
  static const std::map<std::string, std::vector<std::string>> m = {
      {"compare", {"eq", "ne", "lt", "le", "gt", "ge"}},
      {"gelu_tanh", {"gelu"}},  // gelu(x, "tanh")
  };
  return m;
}

}  // namespace kiln::onnx_export
