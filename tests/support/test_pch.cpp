// The source of cohort_test_pch: the target whose precompiled GoogleTest and GoogleMock headers
// every test executable reuses (tests/CMakeLists.txt). It compiles nothing of its own.
