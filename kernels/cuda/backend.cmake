# The CUDA backend's build, included by the root CMakeLists.txt (its loop over kernels/), in the root's scope:
# sets tctl_cuda, which tests/ and bench/ read for their GPU-only parts.
set(TENSORCTL_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc, cuBLAS and nccl.h are found), ON or OFF")
set_property(CACHE TENSORCTL_CUDA PROPERTY STRINGS AUTO ON OFF)

# For sm_90 (H100, H200) plus its PTX, which newer GPUs compile at load.
# Without it every CUDA device name falls back to the CPU with a warning, as on a machine without a GPU.
set(tctl_cuda OFF)
if(NOT TENSORCTL_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  # nccl.h: the toolkit's on the build machine (NCCL itself is opened at run time: nccl_loader.cpp).
  if(CMAKE_CUDA_COMPILER)
    find_path(TCTL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(CMAKE_CUDA_COMPILER AND TARGET CUDA::cublas AND TCTL_NCCL_INCLUDE_DIR)
    set(tctl_cuda ON)
  elseif(TENSORCTL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TENSORCTL_CUDA=ON, but nvcc, cuBLAS or nccl.h was not found")
  endif()
endif()
if(tctl_cuda)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # sm_90 code and compute_90 PTX
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc's flag for C++20, which the kernels need (they include core's headers).
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
endif()
message(STATUS "tensorctl: CUDA backend ${tctl_cuda} (TENSORCTL_CUDA=${TENSORCTL_CUDA})")

if(NOT tctl_cuda)
  # The name "cuda" stays known, its devices falling back to the CPU with the reason (without_cuda.cpp).
  target_sources(tctl_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/without_cuda.cpp)
  return()
endif()
file(GLOB cuda_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp ${CMAKE_CURRENT_LIST_DIR}/*.cu)
list(REMOVE_ITEM cuda_sources ${CMAKE_CURRENT_LIST_DIR}/without_cuda.cpp)
target_sources(tctl_kernels PRIVATE ${cuda_sources})
# tctl_kernels was made before CUDA was enabled, so it takes these from here, not from the variables above.
set_target_properties(tctl_kernels PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CUDA_STANDARD 20
                                              CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
# cuBLAS is opened on first use (cublas_loader.cpp), not linked: linked, it and cuBLASLt were loaded at every
# start, 229 MB resident for `tensorctl --version`. Its headers are still the toolkit's. NCCL likewise
# (nccl_loader.cpp), whose nccl.h the toolkit on the build machine holds.
target_link_libraries(tctl_kernels PUBLIC CUDA::cudart fmt::fmt ${CMAKE_DL_LIBS})
target_include_directories(tctl_kernels PUBLIC ${TCTL_NCCL_INCLUDE_DIR})
# The cuBLAS soname is public for tests/kernels/cuda_libraries_test.cpp, which opens it to compare.
target_compile_definitions(tctl_kernels PUBLIC TENSORCTL_WITH_CUDA=1
                                               TCTL_CUBLAS_LIBRARY="libcublas.so.${CUDAToolkit_VERSION_MAJOR}"
                           PRIVATE TCTL_NCCL_LIBRARY="libnccl.so.2")
# Denormals flushed to zero, as the CPU's kernel threads flush them by default (FlushDenormalsScope):
# without it an input of 1e-40 takes another branch on each device. --keep-denormals is the CPU's alone.
target_compile_options(tctl_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-ftz=true>)
