# Probes the CUDA toolkit, cuBLAS and NCCL and says what it found. TW_CUDA=ON without a toolkit is a
# configure error; AUTO builds the CUDA backend only when all three are present. When they are, sets
# TW_HAVE_CUDA, picks CMAKE_CUDA_ARCHITECTURES and enables the CUDA language (kernels/ is then built).
include(CheckLanguage)

set(TW_HAVE_CUDA OFF)
if(NOT TW_CUDA STREQUAL "OFF")
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_library(TW_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  find_path(TW_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/include)

  set(_cublas "not found")
  if(TARGET CUDA::cublas)
    set(_cublas "found")
  endif()
  set(_nccl "not found")
  if(TW_NCCL_LIBRARY AND TW_NCCL_INCLUDE)
    set(_nccl "found (${TW_NCCL_LIBRARY})")
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    message(STATUS "Tower: CUDA toolkit ${CUDAToolkit_VERSION} found (${CMAKE_CUDA_COMPILER})")
  else()
    message(STATUS "Tower: CUDA toolkit not found")
  endif()
  message(STATUS "Tower: cuBLAS ${_cublas}, NCCL ${_nccl}")

  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TW_NCCL_LIBRARY
     AND TW_NCCL_INCLUDE)
    set(TW_HAVE_CUDA ON)
    # Kernels for A100-class (sm_80 code, which also runs on sm_86/sm_89) and H100/H200 (sm_90 code plus
    # compute_90 PTX, which newer GPUs compile at load time). Two architectures keep a clean build's
    # CUDA compile time modest; -DCMAKE_CUDA_ARCHITECTURES=native (or a list) overrides it.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    # Every target that links the kernels uses the shared CUDA runtime (the one cuBLAS and NCCL load),
    # never a second, static copy.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    message(STATUS "Tower: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(TW_CUDA STREQUAL "ON")
    message(FATAL_ERROR "Tower: -DTW_CUDA=ON was asked for, but the CUDA toolkit, cuBLAS and NCCL "
                        "were not all found (nvcc: '${CMAKE_CUDA_COMPILER}', cuBLAS: ${_cublas}, "
                        "NCCL: ${_nccl}). Install the CUDA toolkit with cuBLAS and NCCL, or "
                        "configure with -DTW_CUDA=OFF.")
  endif()
else()
  message(STATUS "Tower: CUDA disabled (-DTW_CUDA=OFF)")
endif()
message(STATUS "Tower: CUDA backend ${TW_HAVE_CUDA}")
