# Fuzzing build: libFuzzer targets of tests/fuzz with AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
#         -DSCORED_ENABLE_CUDA=OFF -DSCORED_BUILD_FUZZERS=ON
#   cmake --build build-fuzz --target scored_fuzzers -j2      (scripts/fuzz.sh does this and runs them)
#
# Needs clang with its libFuzzer runtime (Debian 12: clang-14 and libclang-rt-14-dev). A separate build
# folder: every project target of that build is compiled with -fsanitize=fuzzer-no-link,address,undefined
# (coverage for libFuzzer, memory and UB checks), so it is never the one tests or releases use. Our
# Debian abseil/protobuf/gRPC were built by gcc against libstdc++, which clang links fine; they are not
# instrumented (bugs inside them are out of scope, calls into them from our code are still checked).
#
# One line in the top-level CMakeLists.txt, anywhere after project(): include(cmake/Fuzz.cmake). It also
# works without it, as -DCMAKE_PROJECT_INCLUDE=<checkout>/cmake/Fuzz.cmake. The work is deferred to the
# end of the top-level directory, when every target exists.
include_guard(GLOBAL)

option(SCORED_BUILD_FUZZERS "Build the libFuzzer targets of tests/fuzz (clang; instruments every target)" OFF)

set(SCORED_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer -gline-tables-only)

# Adds the sanitizer flags to every target defined in `dir` and its subfolders. libFuzzer targets link
# -fsanitize=fuzzer themselves (tests/fuzz/CMakeLists.txt); other executables get the sanitizer runtimes.
function(scored_fuzz_instrument dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "OBJECT_LIBRARY" OR type STREQUAL "SHARED_LIBRARY"
       OR type STREQUAL "MODULE_LIBRARY" OR type STREQUAL "EXECUTABLE")
      target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:${SCORED_FUZZ_FLAGS}>)
      get_target_property(is_fuzzer ${t} SCORED_FUZZER)
      if(NOT type STREQUAL "STATIC_LIBRARY" AND NOT type STREQUAL "OBJECT_LIBRARY" AND NOT is_fuzzer)
        target_link_options(${t} PRIVATE -fsanitize=address,undefined)
      endif()
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS subdirs)
    scored_fuzz_instrument(${d})
  endforeach()
endfunction()

function(scored_fuzz_finish)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SCORED_BUILD_FUZZERS needs clang (libFuzzer); configure a separate build folder with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(SCORED_ENABLE_CUDA)
    message(FATAL_ERROR "SCORED_BUILD_FUZZERS needs -DSCORED_ENABLE_CUDA=OFF (host code only)")
  endif()
  if(SCORED_SANITIZE)
    message(FATAL_ERROR "SCORED_BUILD_FUZZERS already sanitizes every target; leave SCORED_SANITIZE OFF")
  endif()
  # CMake allows no add_subdirectory() in deferred calls: the fuzz targets are defined in this (top-level)
  # directory instead; tests/fuzz/CMakeLists.txt names its files by CMAKE_CURRENT_LIST_DIR for that.
  include(${PROJECT_SOURCE_DIR}/tests/fuzz/CMakeLists.txt)
  scored_fuzz_instrument(${PROJECT_SOURCE_DIR})
endfunction()

if(SCORED_BUILD_FUZZERS)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL scored_fuzz_finish)
endif()
