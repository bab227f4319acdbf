"""The one sentence of fix each advise finding ends with: what to change, by kind, op and figures."""

from __future__ import annotations

import re
from collections.abc import Mapping

from nvbridge.analysis import below_roofline

NO_OP = "(no op range)"
BETWEEN_OPS = "(Python between ops)"


def fix_for(kind: str, op: str, figures: Mapping[str, int] | None = None, count: int = 1) -> str:
    """One sentence: what to change."""
    if kind == below_roofline.KIND:
        return below_roofline.fix(figures or {}, count)
    if kind == "blocking_copy_sync":
        return _blocking_fix(op, figures or {})
    if kind == "exposed_copies":
        return _copy_fix(figures or {})
    if kind == "host_sync":
        if re.search(r"item|_local_scalar_dense|tolist", op):
            return "Keep the value on the GPU (no .item()/.tolist() in the loop), or read it every N steps."
        if re.search(r"nonzero|unique|masked_select|where", op):
            return "Avoid data-dependent shapes here (nonzero/unique/masked_select sync); use fixed-size masks."
        if re.search(r"copy_|_to_copy|\bto\b|cpu", op):
            return "Copy with non_blocking=True into pinned memory, and read the result later."
        return "Remove the explicit synchronize (or move it out of the step): the GPU drains while the host waits."
    return {
        "pageable_copy": "Pin the host tensor (pin_memory=True in the DataLoader) and copy with non_blocking=True.",
        "small_copies": "Batch the small copies into one tensor (or keep the values on the GPU).",
        "launch_bound": "Kernels are shorter than their launches: fuse with torch.compile or use CUDA graphs.",
        "nccl_exposed": "Overlap communication with compute (FSDP/DDP prefetch, bucket sizes, async ops).",
        "rank_skew": "This rank is the straggler: balance its data or work, check its host and input pipeline.",
        "startup": "One-time start-up (context creation, code loaded at a kernel's first launch): warm up "
        "before the steps you measure, or profile later steps.",
    }.get(kind) or _idle_fix(op)


def _blocking_fix(op: str, figures: Mapping[str, int]) -> str:
    """The fix for torch's own blocking copy (.cuda()/.cpu()/.item()): never 'remove the sync'."""
    if figures.get("dtoh_bytes", 0) >= figures.get("htod_bytes", 0):
        if re.search(r"item|_local_scalar_dense|tolist", op):
            return "Keep the value on the GPU (no .item()/.tolist() in the loop), or read it every N steps."
        return (
            "Copy into pinned memory with non_blocking=True and read the result after the step's other "
            "work (or move the read out of the step)."
        )
    if figures.get("pageable", 0):
        return (
            "Pin the host tensor (pin_memory=True in the DataLoader, or .pin_memory()) and copy with non_blocking=True."
        )
    return "The source is pinned: copy with non_blocking=True so the host does not wait for the copy."


def _copy_fix(figures: Mapping[str, int]) -> str:
    """The fix for copy time no kernel hides, by direction and memory."""
    if not (figures.get("htod_bytes", 0) or figures.get("dtoh_bytes", 0)):
        return "Device-to-device copies no kernel hides: avoid them (in-place ops, views instead of .contiguous())."
    overlap = "a side stream, prefetch the next batch" if not figures.get("pageable") else "pinned memory"
    return (
        "Copies the GPU waits on: copy less (keep tensors on the GPU, smaller dtypes), or overlap them "
        f"with compute (non_blocking=True, {overlap})."
    )


def _idle_fix(op: str) -> str:
    """What to do about GPU idle time, by what the host was doing meanwhile."""
    if re.search(r"DataLoader|__next__|collate|dataset", op, re.I):
        return "The GPU waits for input: more DataLoader workers, prefetch_factor, pin_memory, lighter transforms."
    if op in (BETWEEN_OPS, NO_OP):
        return "The GPU waits for Python outside any torch op: move that work off the step or overlap it."
    return "The GPU waits for the host in this op (CPU-bound dispatch): torch.compile, CUDA graphs or larger batches."
