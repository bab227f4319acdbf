"""A converted dataset: ``load`` a directory (or a report) as a :class:`Report`, its files read a
row group at a time (``files``), checked (``check``), and the figures every reader of a dataset
shares: which rank each process is (``ranks``) and the one timeline (``timeline``)."""

from nvbridge.dataset.report import Report, load

__all__ = ["Report", "load"]
