# The CUDA backend's part of the test suites, included by tests/CMakeLists.txt: the op suite again with its
# device tests on cuda:0 (every op with a CUDA kernel compared with the CPU, its gradients checked there) and
# tests/gpu/ training there, both labelled gpu. Without a GPU, or in a build without CUDA, each is skipped
# and `ctest -L gpu` says why.
if(tctl_cuda)
  target_sources(gpu_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu/launch_failure.cu)  # gpu/launch_failure_test.cpp's ops
endif()
add_test(NAME kernels_tests_cuda COMMAND kernels_tests)
set_tests_properties(kernels_tests_cuda gpu_tests PROPERTIES ENVIRONMENT "TCTL_TEST_DEVICE=cuda:0" LABELS gpu
                     SKIP_RETURN_CODE 77 TIMEOUT 1800)
