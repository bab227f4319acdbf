"""A converted dataset: its tables declared (``schema``), its tables (``report``: ``DatasetTables``,
``load``), its files read a row group at a time (``files``), checked (``check``), and the figures
every reader of a dataset shares: which rank each process is (``ranks``) and the one timeline
(``timeline``).

Nothing is imported here: the conversion and the checks read ``schema`` without loading ``report``, which
loads the conversion for a report, and ``nvbridge.dataset.timeline`` loads the timeline alone.
The public ``nvbridge.Report`` and ``nvbridge.load`` are in nvbridge.analysis.report.
"""
