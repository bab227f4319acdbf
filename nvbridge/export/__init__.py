"""Writers of the correlated model: the Parquet dataset (and, later, Chrome traces)."""
