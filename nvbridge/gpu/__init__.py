"""What nvbridge knows of NVIDIA GPUs and CUDA: peaks by architecture (``arch``, ``skus``,
``peaks``) and what a CUDA API call does to the host (``cuda_api``)."""
