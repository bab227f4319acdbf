"""Index helpers the engine's steps share (correlation keys themselves: engine/activity.py)."""

from __future__ import annotations

import numpy as np

BIG = np.iinfo(np.int64).max
# lookup_keys indexes a table when the key range is at most this many times the rows.
DENSE_KEYS = 4


def through(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` where index >= 0, else -1 (works when ``values`` is empty)."""
    if len(values) == 0:
        return np.full(len(index), -1, np.int64)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1)
