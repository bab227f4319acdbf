"""``nvbridge.Report`` and ``nvbridge.load``: a report's tables with the answers torch's profiler gives.

The tables, and reading them, are the dataset's (nvbridge.dataset.report.DatasetTables); the
answers are analysis (key_averages, the GPU header). The public class lives here, above both, so
that analysis imports the dataset and never the reverse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from nvbridge.analysis.averages import key_averages
from nvbridge.analysis.gpu import GpuHeader, gpu_header
from nvbridge.analysis.op_table import KeyAverages
from nvbridge.conversion.memory import load_tables
from nvbridge.dataset import report as dataset
from nvbridge.output import rich


class Report(dataset.DatasetTables):
    """The tables of one converted report, with torch's ``key_averages`` over them.

    Attributes ``ops``, ``gpu_ops``, ``api_calls``, ``marks``, ``syncs``, ``threads`` and
    ``devices`` are Arrow tables (columns in docs/dataset.md); ``meta`` is the key/value
    description of the source, ``rank`` its distributed rank where one was recorded.
    ``df(name)`` gives a table as a pandas DataFrame. A report opened with
    ``load(..., streamed=True)`` reads a table when it is first asked for, and ``chunks``
    reads it a row group at a time instead.
    """

    def _repr_html_(self) -> str | None:
        """The report page, inline in a notebook (drawn by nvbridge/page/notebook.py)."""
        return rich.html("report", self)

    def key_averages(
        self,
        group_by_input_shape: bool = False,
        group_by_stack_n: int = 0,
        group_by_module: bool = False,
        top_level_events_only: bool = False,
        device: int | None = None,
        unattributed: bool = False,
        rank: int | None = None,
    ) -> KeyAverages:
        """Ops grouped like torch's ``key_averages``; ``.table(sort_by=..., row_limit=...)`` prints it.
        ``unattributed`` adds a ``[no op]`` row for GPU ops launched outside every op; ``device``
        and ``rank`` keep the processes that used that GPU / are that rank (as ``summary``)."""
        return key_averages(
            self.ops,
            self.gpu_ops,
            group_by_input_shape=group_by_input_shape,
            group_by_stack_n=group_by_stack_n,
            group_by_module=group_by_module,
            top_level_events_only=top_level_events_only,
            device=device,
            unattributed=unattributed,
            rank=rank,
            recorded_rank=self.recorded_ranks,
        )

    def gpu_summary(self) -> list[GpuHeader]:
        """Per device: busy and idle time, kernel count, copy volume by direction."""
        return gpu_header(self.gpu_ops, self.devices, api_calls=self.api_calls)


def load(
    path: str | os.PathLike[str],
    columns: Mapping[str, Sequence[str]] | None = None,
    in_order: bool = True,
    *,
    streamed: bool = False,
) -> Report:
    """Open a dataset written by ``nvbridge convert``, or convert a report in memory.

    Args:
        path: a dataset directory, a profiler database file, or an SQLAlchemy URL.
        columns: from a dataset directory, read only these columns of these tables (a table
            not named is read whole), e.g. :data:`nvbridge.analysis.SUMMARY_COLUMNS`.
        in_order: ops in op_id order (the default); False skips the sort, for the summary
            tables, which do not need it.
        streamed: from a dataset directory, check its files now but read no table: each is
            read when first asked for, or a row group at a time by ``Report.chunks`` (what
            ``summary`` and ``plot`` do, so their memory does not grow with the report).

    Returns:
        The report's tables (nvbridge.conversion.memory.load_tables reads or converts them) as a
        :class:`Report`.

    Raises:
        InputError: a report that cannot be read.
        ExportError: a directory that is not an nvbridge dataset.
        DamagedDataset: a dataset file missing, unreadable, of another schema, or with rows a
            conversion never writes.
    """
    return Report.view(load_tables(path, columns, in_order, streamed=streamed))
