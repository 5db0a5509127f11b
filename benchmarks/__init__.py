"""Benchmarks, run as scripts or as `python -m benchmarks.<name>`: a package, so that the zoo
(`benchmarks.models`) imports ahead of any installed `benchmarks`."""
