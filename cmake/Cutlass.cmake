# CUTLASS 3 headers (header-only) for the kernels built on its SM90 collectives (engine/kernels/int8_gemm.cu).
# They come from PyPI's nvidia-cutlass wheel, pinned in scripts/requirements-build.txt and installed into
# .venv by scripts/setup_python.sh; -DSCORED_CUTLASS_DIR=<folder holding include/ and tools/util/include/>
# points at another copy (a CUTLASS source checkout has the same layout).
#
# Defines the INTERFACE target cutlass_headers (SYSTEM includes: the headers' own warnings are not ours).
set(SCORED_CUTLASS_DIR "" CACHE PATH "CUTLASS source folder (include/, tools/util/include/); default: .venv's nvidia-cutlass")
if(NOT SCORED_CUTLASS_DIR)
  file(GLOB cutlass_headers_candidates
       "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/cutlass_library/source")
  list(LENGTH cutlass_headers_candidates cutlass_headers_count)
  if(cutlass_headers_count GREATER 0)
    list(GET cutlass_headers_candidates 0 cutlass_headers_found)
    set(SCORED_CUTLASS_DIR "${cutlass_headers_found}" CACHE PATH "CUTLASS source folder" FORCE)
  endif()
endif()
if(NOT EXISTS "${SCORED_CUTLASS_DIR}/include/cutlass/cutlass.h")
  message(FATAL_ERROR
    "CUTLASS headers not found (SCORED_CUTLASS_DIR='${SCORED_CUTLASS_DIR}'): the CUDA backend's int8 GEMM "
    "needs them. Run scripts/setup_python.sh (installs nvidia-cutlass into .venv), pass "
    "-DSCORED_CUTLASS_DIR=<CUTLASS folder>, or configure with -DSCORED_ENABLE_CUDA=OFF.")
endif()
message(STATUS "scored: CUTLASS headers from ${SCORED_CUTLASS_DIR}")
add_library(cutlass_headers INTERFACE)
target_include_directories(cutlass_headers SYSTEM INTERFACE
  "${SCORED_CUTLASS_DIR}/include" "${SCORED_CUTLASS_DIR}/tools/util/include")
