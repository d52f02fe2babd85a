// The source of scored_test_pch, the target that builds the tests' precompiled header (tests/CMakeLists.txt).
