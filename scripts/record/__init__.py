"""The recordings in sample_db/: shell scripts that run scripts.workloads under ``nsys profile``
(``samples.sh``, ``advise.sh``, ``autograd.sh``, sharing ``nsys.sh``), the NVTX domain program
(``nvtx_domains.c``) and the SYNTHETIC GPU layers added to CPU recordings (``synthetic_gpu`` and
its users ``advise_gpu``, ``copies_gpu``, ``autograd_gpu``). See sample_db/README.md."""
