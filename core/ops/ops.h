// The op definitions core holds: name, inputs, shape function and gradient, one function per op family
// (core/ops/<family>.cpp). Kernels are registered apart, by the kernels/ folders, one per (op, device kind).
//
// core is a static library, where a static registrar that nothing references is dropped by the linker, so
// these are called explicitly: the op registry calls every one of them once, before its first lookup or
// kernel registration (see core/op_registry.cpp). Not thread-safe on their own; only the registry calls them.
#pragma once

namespace tctl {

void define_activations_ops();
void define_attention_ops();
void define_batch_norm_ops();
void define_collective_ops();
void define_concat_ops();
void define_conv_ops();
void define_delay_ops();
void define_dropout_ops();
void define_elementwise_ops();
void define_losses_ops();
void define_loss_scale_ops();
void define_matmul_ops();
void define_optimizers_ops();
void define_pooling_ops();
void define_reduce_ops();
void define_recurrent_ops();
void define_reshape_ops();
void define_sequence_ops();

}  // namespace tctl
