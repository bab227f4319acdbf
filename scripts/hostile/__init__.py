"""Hostile inputs: the corpus of damaged exports, environments and names (``inputs``, built from
``cases``, ``db``, ``environment``, ``names``), the readers' fuzzer (``fuzz_readers``) and the page
reader's fuzzers (``fuzz_pages``, ``fuzz_pages_raw``, ``fuzz_pages_scan``; pages parsed by
``page_map``, damaged by ``page_mutants``, run under ``sanitize``). See docs/reliability.md."""
