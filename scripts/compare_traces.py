#!/usr/bin/env python3
"""Compare Chrome traces by content: the header and the multiset of parsed events, order aside.

    python scripts/compare_traces.py before.json.gz after.json.gz [more pairs...]
    python scripts/compare_traces.py --ignore api-names --ignore distributed-info old.json.gz new.json.gz

Two traces of one report written by different code (the whole-table writer and the streamed one,
``nvbridge trace`` and ``convert --chrome``) may order their events differently; viewers do not
care. Prints, per pair, the event counts and up to three events found in only one of them; the
exit status is 1 when any pair differs.

``--ignore api-names`` compares CUDA API calls by the name the report gives them (a trace that
names them as Kineto does keeps it in ``args["cbid name"]``); ``--ignore distributed-info``
leaves the header's ``distributedInfo`` out: a trace written before either change then compares
equal to one written after, where nothing else changed.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any


def content(path: Path, ignore: frozenset[str] = frozenset()) -> tuple[dict[str, Any], Counter[str]]:
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    events = doc.pop("traceEvents")
    if "distributed-info" in ignore:
        doc.pop("distributedInfo", None)
    if "api-names" in ignore:
        for e in events:
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "cbid name" in e.get("args", {}):
                e["name"] = e["args"].pop("cbid name")
    return doc, Counter(json.dumps(e, sort_keys=True) for e in events)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", type=Path, nargs="+", help="pairs of trace files: A1 B1 [A2 B2 ...]")
    ap.add_argument(
        "--ignore",
        action="append",
        default=[],
        choices=["api-names", "distributed-info"],
        help="compare API calls by the report's names, or leave distributedInfo out (repeatable)",
    )
    args = ap.parse_args(argv)
    if len(args.traces) % 2:
        ap.error("give the traces in pairs")
    same = True
    for a, b in zip(args.traces[::2], args.traces[1::2]):
        ignore = frozenset(args.ignore)
        (head_a, ev_a), (head_b, ev_b) = content(a, ignore), content(b, ignore)
        only_a, only_b = ev_a - ev_b, ev_b - ev_a
        ok = head_a == head_b and not only_a and not only_b
        same &= ok
        print(
            f"{a.name} vs {b.name}: {'same' if ok else 'DIFFERENT'} ({sum(ev_a.values()):,} and "
            f"{sum(ev_b.values()):,} events{'' if head_a == head_b else ', headers differ'})"
        )
        for label, extra in ((a.name, only_a), (b.name, only_b)):
            for event in list(extra.elements())[:3]:
                print(f"  only in {label}: {event}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
