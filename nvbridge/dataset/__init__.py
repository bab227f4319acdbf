"""A converted dataset: its tables (``report``: ``ReportTables``, ``load``), its files read a row
group at a time (``files``), checked (``check``), and the figures every reader of a dataset
shares: which rank each process is (``ranks``) and the one timeline (``timeline``).

Nothing is imported here: ``nvbridge.dataset.timeline`` loads the timeline, not the readers and
the engine that ``load`` needs for a report. The public ``nvbridge.Report`` and ``nvbridge.load``
are in nvbridge.analysis.report.
"""
