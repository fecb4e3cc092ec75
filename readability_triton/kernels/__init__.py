"""GPU kernels in CUDA C++: sources, NVRTC check, CPU build, counting stand-in."""
