#include "core/op_registry.h"

#include <algorithm>
#include <map>
#include <memory>

#include "core/errors.h"

namespace tctl {

namespace {
// Function-local so registrars in other translation units may run in any order.
std::map<std::string, std::unique_ptr<OpDef>, std::less<>>& registry() {
  static std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
  return ops;
}
}  // namespace

void InferContext::fail(const std::string& message) const {
  throw ShapeError(std::string(node_name_) + ": " + message);
}

void InferContext::expect_rank(int i, int rank) const {
  if (shape(i).rank() != rank)
    fail("input " + std::to_string(i) + " must have rank " + std::to_string(rank) + ", got shape " +
         shape(i).to_string());
}

void InferContext::expect_dtype(int i, DType dtype) const {
  if (input(i).dtype != dtype)
    fail("input " + std::to_string(i) + " must be " + std::string(dtype_name(dtype)) + ", got " +
         std::string(dtype_name(input(i).dtype)));
}

bool register_op(OpDef def) {
  auto& ops = registry();
  TCTL_CHECK(!ops.contains(def.name), "op registered twice: " + def.name);
  TCTL_CHECK(static_cast<bool>(def.infer), "op without a shape function: " + def.name);
  std::string name = def.name;
  ops.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
  return true;
}

const OpDef& op_def(std::string_view name) {
  auto& ops = registry();
  auto it = ops.find(name);
  TCTL_CHECK(it != ops.end(), "unknown op " + std::string(name));
  return *it->second;
}

InferFn same_as_input(int i) {
  return [i](const InferContext& c) { return c.input(i); };
}

}  // namespace tctl
