"""Conversions: reports into Parquet datasets (and Chrome traces), or into tables in memory.

- ``pipeline``: the one pipeline every conversion runs (reader -> name parsing -> engine -> sinks);
- ``sinks``: the dataset's files, tables in memory; ``trace``: the traces written alongside;
- ``report``: one report into one dataset directory (``convert_one``), all or nothing;
- ``many``: several reports (``convert``, what ``nvbridge.convert`` is), partitioned by report;
- ``memory``: a report in memory (``nvbridge.load`` of a report);
- ``result``: what a conversion read and wrote; ``record``: recording with nsys.

Nothing is imported here: ``nvbridge.load`` of a report imports ``memory`` alone, and what it
needs, never the writers.
"""
