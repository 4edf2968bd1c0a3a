"""`make bench`: the benchmarks (docs/benchmarks.md)."""
