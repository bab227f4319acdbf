"""Conversion: profiler databases -> Parquet datasets.

``report`` converts one report (streamed where it can), ``many`` several into one partitioned
dataset (in processes or on Dask), ``result`` holds the figures a conversion reports.
"""

from __future__ import annotations

from nvbridge.conversion.estimate import estimate_rows
from nvbridge.conversion.many import convert
from nvbridge.conversion.report import Progress, convert_one
from nvbridge.conversion.result import ConversionResult, rank_from_name

__all__ = ["ConversionResult", "Progress", "convert", "convert_one", "estimate_rows", "rank_from_name"]
