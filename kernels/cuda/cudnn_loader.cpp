#include "kernels/cuda/cudnn_loader.h"

#include <mutex>

#include "kernels/cuda/library_loader.h"

namespace tctl::cuda {

const Cudnn& cudnn() {
  static Cudnn table;
  static std::once_flag once;
  std::call_once(once, [] {
    // The legacy convolution API, which libcudnn.so.9 exports and serves from the libraries beside it
    // (libcudnn_cnn and the engines it loads).
    LibraryLoader library(TCTL_CUDNN_LIBRARY, "cuDNN");
    library.find("cudnnGetVersion", table.get_version);
    library.find("cudnnGetErrorString", table.error_string);
    library.find("cudnnCreate", table.create);
    library.find("cudnnSetStream", table.set_stream);
    library.find("cudnnCreateTensorDescriptor", table.create_tensor);
    library.find("cudnnSetTensor4dDescriptor", table.set_tensor_4d);
    library.find("cudnnCreateFilterDescriptor", table.create_filter);
    library.find("cudnnSetFilter4dDescriptor", table.set_filter_4d);
    library.find("cudnnCreateConvolutionDescriptor", table.create_convolution);
    library.find("cudnnSetConvolution2dDescriptor", table.set_convolution_2d);
    library.find("cudnnSetConvolutionMathType", table.set_math_type);
    library.find("cudnnGetConvolution2dForwardOutputDim", table.forward_output_dim);
    library.find("cudnnGetConvolutionForwardAlgorithm_v7", table.forward_algorithms);
    library.find("cudnnGetConvolutionForwardWorkspaceSize", table.forward_workspace);
    library.find("cudnnConvolutionForward", table.forward);
    library.find("cudnnGetConvolutionBackwardDataAlgorithm_v7", table.backward_data_algorithms);
    library.find("cudnnGetConvolutionBackwardDataWorkspaceSize", table.backward_data_workspace);
    library.find("cudnnConvolutionBackwardData", table.backward_data);
    library.find("cudnnGetConvolutionBackwardFilterAlgorithm_v7", table.backward_filter_algorithms);
    library.find("cudnnGetConvolutionBackwardFilterWorkspaceSize", table.backward_filter_workspace);
    library.find("cudnnConvolutionBackwardFilter", table.backward_filter);
    table.loaded = library.loaded(table.why_not);
  });
  return table;
}

}  // namespace tctl::cuda
