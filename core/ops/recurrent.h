// What the recurrent ops' definitions (core/ops/recurrent.cpp) and their kernels share: the cell a node runs
// (attribute "cell"), its gates and the planes of its workspace.
//
// A Recurrence node runs one recurrent layer over a whole sequence. Its input is the sequence already
// multiplied by the layer's input kernel, xp [N, T, G H] (one MatMul for every step at once, whose
// gradients autodiff gives), and it adds the bias and h_{t-1} U at each step. Its output is the workspace
// [P, N, T, H]: P planes of [N, T, H], plane 0 the outputs h, the others what the gradient needs, each
// indexed by the step in the order the cell ran them (the last input first with go_backwards, as Keras).
#pragma once

#include <cstdint>
#include <string>

#include "core/attrs.h"
#include "core/counter_random.h"
#include "core/errors.h"
#include "core/shape.h"

namespace tctl {

// Keras' cells: SimpleRNN (tanh or relu), LSTM (gates i, f, c, o), GRU with reset_after (gates z, r, h).
enum class RecurrentCell { kSimpleTanh, kSimpleRelu, kLstm, kGru };

// The cell's name in a node's "cell" attribute, by RecurrentCell.
inline constexpr const char* kRecurrentCellNames[] = {"simple_tanh", "simple_relu", "lstm", "gru"};

inline std::string recurrent_cell_name(RecurrentCell cell) { return kRecurrentCellNames[static_cast<int>(cell)]; }

inline RecurrentCell recurrent_cell(const Attrs& attrs) {
  const std::string& cell = attrs.s("cell");
  for (int i = 0; i < 4; ++i)
    if (cell == kRecurrentCellNames[i]) return static_cast<RecurrentCell>(i);
  TCTL_CHECK(false, "unknown recurrent cell " + cell);
  return RecurrentCell::kGru;
}

// Gates per unit: the columns of the kernels are G H wide.
inline std::int64_t recurrent_gates(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::kLstm:
      return 4;
    case RecurrentCell::kGru:
      return 3;
    default:
      return 1;
  }
}

// Workspace planes: LSTM h, c, i, f, g, o (the gates after their activations); GRU h, z, r, hh (the
// candidate) and rh (h_{t-1} U_h + b_rh, which the reset gate scales); SimpleRNN h.
inline std::int64_t recurrent_planes(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::kLstm:
      return 6;
    case RecurrentCell::kGru:
      return 5;
    default:
      return 1;
  }
}

// The bias's shape for this cell and G H columns: the GRU's [2, 3 H] holds the input bias, then the recurrent
// bias that its reset gate scales.
inline Shape recurrent_bias_shape(RecurrentCell cell, std::int64_t columns) {
  return cell == RecurrentCell::kGru ? Shape{2, columns} : Shape{columns};
}

// A workspace's sizes and the node's direction, for the kernels (CPU and CUDA): P planes of [batch, steps,
// units], columns = G units.
struct RecurrentDims {
  RecurrentCell cell;
  std::int64_t batch, steps, units, columns;
  bool backwards;
  // The input step the cell reads at its k-th step.
  TCTL_HOST_DEVICE std::int64_t time(std::int64_t k) const { return backwards ? steps - 1 - k : k; }
  // Where row k of example i in plane p starts, in floats from the workspace's first.
  TCTL_HOST_DEVICE std::int64_t row(std::int64_t p, std::int64_t i, std::int64_t k) const {
    return ((p * batch + i) * steps + k) * units;
  }
};

inline RecurrentDims recurrent_dims(const Attrs& attrs, const Shape& workspace) {
  const RecurrentCell cell = recurrent_cell(attrs);
  return {cell,
          workspace[1],
          workspace[2],
          workspace[3],
          recurrent_gates(cell) * workspace[3],
          attrs.i_or("go_backwards", 0) != 0};
}

}  // namespace tctl
