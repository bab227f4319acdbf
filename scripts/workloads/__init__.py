"""Training workloads, each defined once: recorded into sample_db/ (scripts/record/), run again by
the tests (FLOPs against FlopCounterMode, the observer against torch.profiler, emit_nvtx's
mechanics) and timed by scripts/bench/annotate.py.

``loop`` is the one training loop; ``samples``, ``advise``, ``net``, ``exact``, ``flops`` and
``autograd_thread`` hold the models and workloads, and the entry points that run them under
emit_nvtx (``python -m scripts.workloads.samples cnn``). The workloads themselves are plain torch:
a reference run (FlopCounterMode, torch.profiler) never imports nvbridge. ``collector`` builds
the test NVTX collector they run under outside nsys.
"""
