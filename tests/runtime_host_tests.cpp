// runtime/emmy_cuda_host.h, the parts that need no driver: how a launch packs its arguments for
// cuLaunchKernel, and CUDA's last-error semantics. This file includes the header on its own, as the
// harness does, since the header defines CUDA's names (dim3, __half, cudaGetLastError) globally.
#include "runtime/emmy_cuda_host.h"

#include <string>

#include <catch2/catch.hpp>

TEST_CASE("a launch passes cuLaunchKernel a pointer to each argument and its size", "[runtime]") {
  const float* input = reinterpret_cast<const float*>(0x1000);
  float* output = reinterpret_cast<float*>(0x2000);
  int64_t size = 1000;
  float scale = 0.5f;
  bool flag = true;
  int8_t small = -3;
  __half half{0x3c00};
  double wide = 2.5;
  EmmyHostArguments<8> packed = emmy_host_pack(input, output, size, scale, flag, small, half, wide);
  const size_t sizes[] = {8, 8, 8, 4, 1, 1, 2, 8};
  for (size_t k = 0; k < 8; ++k) CHECK(packed.sizes[k] == sizes[k]);
  CHECK(*static_cast<const float**>(packed.pointers[0]) == input);
  CHECK(*static_cast<float**>(packed.pointers[1]) == output);
  CHECK(*static_cast<int64_t*>(packed.pointers[2]) == 1000);
  CHECK(*static_cast<float*>(packed.pointers[3]) == 0.5f);
  CHECK(*static_cast<bool*>(packed.pointers[4]));
  CHECK(*static_cast<int8_t*>(packed.pointers[5]) == -3);
  CHECK(static_cast<__half*>(packed.pointers[6])->bits == 0x3c00);
  CHECK(*static_cast<double*>(packed.pointers[7]) == 2.5);
  CHECK(packed.pointers[2] == &size);  // the values themselves, which live as long as the caller's frame
}

TEST_CASE("cudaGetLastError returns the last error and clears it; cudaPeekAtLastError only returns it", "[runtime]") {
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(emmy_host_record(emmy_cuda::CUDA_SUCCESS) == cudaSuccess);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(emmy_host_record(700) == 700);  // CUDA_ERROR_ILLEGAL_ADDRESS
  CHECK(emmy_host_record(emmy_cuda::CUDA_SUCCESS) == cudaSuccess);  // a success does not hide it
  CHECK(cudaPeekAtLastError() == 700);
  CHECK(cudaGetLastError() == 700);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(std::string(cudaGetErrorString(700)) == "CUDA error 700");  // the driver is not loaded here
}

TEST_CASE("dim3 defaults its missing dimensions to 1", "[runtime]") {
  dim3 grid(7);
  CHECK((grid.x == 7 && grid.y == 1 && grid.z == 1));
  dim3 block(32, 4);
  CHECK((block.x == 32 && block.y == 4 && block.z == 1));
}
