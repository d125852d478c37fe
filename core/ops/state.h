// The ops core itself relies on: values entering a graph (Placeholder, Const), variable reads and writes,
// and Copy, which the executor inserts where an edge crosses devices. Their kernels hold no arithmetic, so
// core registers them for every device kind. Code recognises them by definition, not by name.
#pragma once

#include "core/op_registry.h"

namespace tctl::ops {

const OpDef& placeholder();
const OpDef& constant();
const OpDef& read_variable();
const OpDef& assign_variable();
const OpDef& copy();

// Registers the definitions and kernels above; called once by the op registry before any lookup.
void define_state_ops();

}  // namespace tctl::ops
