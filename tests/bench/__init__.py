"""Tests of the benchmarks' pure parts; the benchmarks themselves run with `make bench`."""
