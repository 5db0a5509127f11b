"""Small real models used by the README, the tests and the benchmarks."""
