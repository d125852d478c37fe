// cuDNN, opened on first use for the convolutions it runs (kernels/cuda/cudnn_conv.cu), like cuBLAS and NCCL
// (library_loader.h): linked, its libraries would load at every start, and a machine without them could not
// start tensorctl.
#pragma once

#include <cudnn.h>

#include <string>

// The soname of the cuDNN major version whose headers the build read: "libcudnn.so.9".
#define TCTL_CUDNN_STRINGIFY(x) #x
#define TCTL_CUDNN_SONAME(major) "libcudnn.so." TCTL_CUDNN_STRINGIFY(major)
#define TCTL_CUDNN_LIBRARY TCTL_CUDNN_SONAME(CUDNN_MAJOR)

namespace tctl::cuda {

// The cuDNN functions tensorctl calls. A table, where cuBLAS's and NCCL's loaders define forwarding functions
// under the libraries' own names: one file calls these, and its calls read as plainly through the table.
struct Cudnn {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor_4d = nullptr;
  decltype(&cudnnCreateFilterDescriptor) create_filter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) set_filter_4d = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) create_convolution = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) set_convolution_2d = nullptr;
  decltype(&cudnnSetConvolutionMathType) set_math_type = nullptr;
  decltype(&cudnnGetConvolution2dForwardOutputDim) forward_output_dim = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) forward_algorithms = nullptr;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) forward_workspace = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) backward_data_algorithms = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) backward_data_workspace = nullptr;
  decltype(&cudnnConvolutionBackwardData) backward_data = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) backward_filter_algorithms = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) backward_filter_workspace = nullptr;
  decltype(&cudnnConvolutionBackwardFilter) backward_filter = nullptr;
  bool loaded = false;
  std::string why_not;  // when not loaded: "cuDNN could not be loaded: <dlopen's or dlsym's reason>"
};

// The table, the library opened on the first call (TCTL_CUDNN_LIBRARY) and never closed: its handles live as long as
// the devices that made them.
const Cudnn& cudnn();

}  // namespace tctl::cuda
