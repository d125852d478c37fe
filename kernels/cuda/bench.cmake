# The CUDA backend's benchmarks, included by bench/CMakeLists.txt: the GPU's own limits (cuBLAS products,
# pinned copies) for bench/compare_pytorch_gpu.sh, in CUDA builds only.
if(tctl_cuda)
  add_executable(bench_cuda_limits ${PROJECT_SOURCE_DIR}/bench/cuda_limits.cu)
  target_link_libraries(bench_cuda_limits PRIVATE tctl_kernels CUDA::cudart CUDA::cublas)
endif()
