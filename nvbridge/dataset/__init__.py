"""A converted dataset: its tables declared (``schema``), ``load`` of a directory (or a report) as
a Report (``report``), its files read a row group at a time (``files``), checked (``check``), and
the figures every reader of a dataset shares: which rank each process is (``ranks``) and the one
timeline (``timeline``).

Nothing is imported here: the engine reads ``schema`` without loading ``report``, which loads the
conversion for a report.
"""
