// Compiles the test suites' precompiled header (tests/CMakeLists.txt).
int main() { return 0; }
