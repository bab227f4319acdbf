"""Benchmarks: each times nvbridge's commands (or emit_nvtx) in subprocesses, against a floor, a
baseline revision or torch's own tools (docs/benchmarks.md). ``large_db`` tiles a real export
into the large inputs; ``measure`` times one subprocess (wall, CPU, peak RSS)."""
