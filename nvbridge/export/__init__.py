"""Writers of the correlated model: the Parquet dataset (parquet.py) and the Chrome trace (chrome.py,
the streamed writer; chrome_text.py, chrome_tracks.py and chrome_flows.py, its parts; trace.py,
a report or dataset to one trace file)."""
