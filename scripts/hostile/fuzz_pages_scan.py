"""scripts/hostile/fuzz_pages.py --scan-only: the page reader's own reads of each mutant, no conversion.

Per mutant, in a forked child: the survey, then every table the page reader takes read whole
(its integer and text columns and the rowid), each compared with the same read of the undamaged
file. A table read ends ``same``, ``different``, ``damaged`` (Damaged: refused, naming the
page) or ``unreadable`` (left to SQLite). A mutant fails when the child crashes (a signal: a
segfault, a sanitizer's abort), hangs (60 s), raises anything else, or reads a table
``different`` while SQLite refuses the file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.hostile.fuzz_pages import keep, sqlite_verdict
from scripts.hostile.page_mutants import Mutator


def _kind(declared: str) -> str:
    t = declared.upper()
    return "i" if "INT" in t else "s" if any(k in t for k in ("CHAR", "CLOB", "TEXT")) else ""


def reads(path: Path, schema_from: Path) -> dict[str, Any]:
    """Each table's page-reader read of ``path`` (its schema as ``schema_from`` has it): the
    columns as Python lists, or "damaged: ..." / "unreadable"."""
    from nvbridge.compiled import native
    from nvbridge.readers._pages import table_layout
    from nvbridge.readers._sqlite import _array

    assert native is not None
    con = sqlite3.connect(f"file:{schema_from}?mode=ro", uri=True)
    try:
        names = [str(n) for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        roots = tuple(int(r) for (r,) in con.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1"))
        layouts = {n: table_layout(n, lambda sql: [tuple(r) for r in con.execute(sql)]) for n in names}
        infos = {n: con.execute(f'PRAGMA table_info("{n}")').fetchall() for n in names}
    finally:
        con.close()
    out: dict[str, Any] = {}
    try:
        pages = native.Pages(path)
        pages.survey(roots)
    except native.Unreadable:
        return {"*": "unreadable"}
    except native.Damaged as exc:
        return {"*": f"damaged: {exc.args[0]}"}
    for name, layout in layouts.items():
        if layout is None:
            continue
        cols = [
            (str(r[1]), _kind(str(r[2] or "")))
            for r in infos[name]
            if _kind(str(r[2] or "")) and str(r[1]) in layout.positions
        ]
        kinds = "".join(k for _, k in cols) + "i"
        scan = layout.scan([c for c, _ in cols] + ["rowid"], kinds, None)
        if scan is None:
            continue
        not_null = [i for i, (c, _) in enumerate(cols) if any(r[1] == c and r[3] for r in infos[name])]
        try:
            columns, _, _ = scan.run(pages)
            out[name] = [_array(k, c).to_pylist() for k, c in zip(kinds, columns)]
            if any(None in out[name][i] for i in not_null):  # as the readers refuse it (_tally.no_forbidden_nulls)
                out[name] = "damaged: NULL in a NOT NULL column"
        except native.Damaged as exc:
            out[name] = f"damaged: {exc}"
        except native.Unreadable:
            out[name] = "unreadable"
    return out


def _one(path: Path, source: Path, want: dict[str, Any], result: Path) -> None:
    verdict = sqlite_verdict(path)
    got = reads(path, source)
    wrong = [t for t, v in got.items() if isinstance(v, list) and v != want.get(t)]
    outcome = {
        "sqlite": verdict,
        "different": wrong,
        "damaged": sum(isinstance(v, str) and v.startswith("damaged") for v in got.values()),
    }
    result.write_text(json.dumps(outcome))


def scan_fuzz(planned: list[tuple[Path, str, int]], seconds: float, keep_found: bool = True) -> int:
    work = Path(tempfile.mkdtemp(prefix="nvbridge-fuzz-scan-"))
    mutators: dict[Path, Mutator] = {}
    wants: dict[Path, dict[str, Any]] = {}
    failures = damaged = refused = i = 0
    started = time.monotonic()
    for i, (source, family, seed) in enumerate(planned):
        if seconds and time.monotonic() - started > seconds:
            break
        mutator = mutators.setdefault(source, Mutator(source))
        if source not in wants:
            wants[source] = reads(source, source)
        mutant = mutator.make(family, random.Random(seed))
        path, result = work / ("mutant" + source.suffix), work / "result.json"
        path.write_bytes(mutant.apply(source.read_bytes()))
        result.unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:
            try:
                _one(path, source, wants[source], result)
                os._exit(0)
            finally:
                os._exit(70)
        status, deadline = 0, time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -1
                break
            time.sleep(0.002)
        why = ""
        if status == -1:
            why = "hang"
        elif os.WIFSIGNALED(status):
            why = f"crash (signal {os.WTERMSIG(status)})"
        elif os.WEXITSTATUS(status) or not result.exists():
            why = "an exception"
        else:
            outcome = json.loads(result.read_text())
            refused += outcome["sqlite"] == "refuses"
            damaged += bool(outcome["damaged"])
            if outcome["different"] and outcome["sqlite"] == "refuses":
                why = f"read {outcome['different']} differently where SQLite refuses"
        if why:
            failures += 1
            if keep_found:
                keep({**mutant.recipe(), "failure": f"scan-only: {why}"})
            print(f"FAIL {i} {source.name} {family}: {why} ({mutant.what}) {json.dumps(mutant.recipe())}", flush=True)
    summary = f"SQLite refused {refused}, the page reader found damage in {damaged}"
    print(f"scan-only: {i + 1} mutants, {summary}, {failures} failing")
    return 1 if failures else 0
