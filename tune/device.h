// The CUDA devices of this machine, asked in a child process (backend/cuda_device.h): the parent of the
// measuring children must never initialise CUDA, which does not survive fork.
#pragma once

#include "backend/cuda_device.h"

namespace emmy::tune {

CudaDeviceProbe probeCudaDevicesInChild();

}  // namespace emmy::tune
