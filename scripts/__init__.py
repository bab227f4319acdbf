"""nvbridge's development tools, run from the repository root as modules.

    python -m scripts.bench.trace --nvtx-rows 2000000      # benchmarks (scripts/bench/)
    python -m scripts.hostile.inputs --quick               # the hostile corpus, fuzzers (scripts/hostile/)
    bash scripts/record/samples.sh                         # recordings in sample_db/ (scripts/record/)
    python -m scripts.compare_datasets --base REV          # every dataset two revisions write

``scripts.workloads`` defines each training workload once: recorded into sample_db/, run by the
tests, timed by the benchmarks. ``scripts.paths`` says where the inputs are. The tests import
from here (workloads, the page map); nothing here imports the tests.
"""
