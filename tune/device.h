// The CUDA device emmy tune measures on (runtime/device.h), probed in a child process: cuInit starts the
// driver's threads in the calling process, and the parent of the measuring children forks one per
// candidate; a fork keeps only the forking thread, so a lock one of the driver's threads held at that
// moment would never be released in the child. A parent that never initialises CUDA forks plain copies.
#pragma once

#include "runtime/device.h"

namespace emmy::tune {

// runtime::probeCudaDevice's answer, as the child found it; a child that crashed or hung is the reason.
// Where this process has already initialised the driver, the answer is this process's own.
runtime::DeviceProbe probeCudaDeviceInChild();

}  // namespace emmy::tune
