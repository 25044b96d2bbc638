"""Benchmarks, run by hand (`make bench`); results go in benchmarks/README.md."""
