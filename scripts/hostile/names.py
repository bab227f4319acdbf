"""Names, URLs, meta values, dictionaries and kills between renames for scripts/hostile/inputs.py
(issue 24's families: each one found internal errors, a leak or a lost dataset before).
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scripts.hostile.cases import TIMEOUT, Case, Run, convert_run, copy_to, env, judge, nvbridge, snapshot


def _odd(name: bytes) -> str:
    """A file name from bytes (not UTF-8 ones too), as subprocess passes it on."""
    return os.fsdecode(name)


def name_cases(sample: Path) -> list[Case]:
    def in_not_utf8(work: Path) -> Run:
        return convert_run(copy_to(sample, work, _odd(b"bad\xff.sqlite")), work, "ok")

    def out_not_utf8(work: Path) -> Run:
        out = work / "out" / _odd(b"o\xfe")
        return Run(nvbridge("convert", copy_to(sample, work), "-o", out, "-q"), "error", [out])

    def trace_not_utf8(work: Path) -> Run:
        return Run(nvbridge("trace", copy_to(sample, work), "-o", work / "out" / _odd(b"t\xfe.json")), "ok")

    def in_255(work: Path) -> Run:
        return convert_run(copy_to(sample, work, "a" * 248 + ".sqlite"), work, "ok")

    def out_256(cmd: str) -> Callable[[Path], Run]:
        def build(work: Path) -> Run:
            suffix = {"convert": "", "trace": ".json", "plot": ".png"}[cmd]
            out = work / "out" / ("b" * (256 - len(suffix)) + suffix)
            args = (cmd, copy_to(sample, work), "-o", out) + (("-q",) if cmd == "convert" else ())
            return Run(nvbridge(*args), "error", [out])

        return build

    def out_legal(n: int) -> Callable[[Path], Run]:
        def build(work: Path) -> Run:
            out, trace = work / "out" / ("d" * n), work / "out" / ("t" * (n - 8) + ".json.gz")

            def complete(_proc: subprocess.CompletedProcess[str]) -> str | None:
                left = [p.name[:40] for p in (work / "out").iterdir() if ".nvbridge-" in p.name]
                ok = (out / "meta.parquet").is_file() and trace.is_file()
                return None if ok and not left else f"outputs missing or staging names left: {left}"

            return Run(
                nvbridge("convert", copy_to(sample, work), "-o", out, "--chrome", trace, "-q"), "ok", [], complete
            )

        return build

    def newline_in(work: Path) -> Run:
        junk = work / "in" / "j\nk.sqlite"
        junk.write_bytes(b"not a database" * 20)
        return convert_run(junk, work, "error")

    def newline_out(work: Path) -> Run:
        out = work / "out" / "no\ndir" / "ds"
        return Run(nvbridge("convert", copy_to(sample, work), "-o", out, "-q"), "error", [out])

    cases = [
        ("input-not-utf8", in_not_utf8),
        ("output-not-utf8", out_not_utf8),
        ("trace-not-utf8", trace_not_utf8),
        ("input-255-bytes", in_255),
        ("newline-in-input", newline_in),
        ("newline-in-output-folder", newline_out),
        *((f"{cmd}-256-bytes", out_256(cmd)) for cmd in ("convert", "trace", "plot")),
        *((f"convert-{n}-bytes", out_legal(n)) for n in (220, 255)),
    ]
    return [Case(f"names/{n}", "names", b) for n, b in cases] + [
        Case("names/cwd-past-PATH_MAX", "names", lambda w: Run([]), runner=deep_cwd_runner(sample))
    ]


def deep_cwd_runner(sample: Path) -> Callable[[Case, Path], tuple[str, str]]:
    """A relative input in a working directory deeper than PATH_MAX: one line, never "damaged"."""

    def run(case: Case, work: Path) -> tuple[str, str]:
        fd = os.open(work / "in", os.O_RDONLY)
        depth = len(os.fsencode(work / "in"))
        try:
            while depth < 4200:  # made a folder at a time, by descriptor
                os.mkdir("d" * 250, dir_fd=fd)
                inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd, depth = inner, depth + 251
            copy = os.open("in.sqlite", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            with os.fdopen(copy, "wb") as out:
                out.write(sample.read_bytes())
            r = Run(nvbridge("convert", "in.sqlite", "-o", "ds", "-q"), "error")
            try:
                proc: subprocess.CompletedProcess[str] | None = subprocess.run(
                    r.argv,
                    capture_output=True,
                    text=True,
                    timeout=r.timeout,
                    env=env(),
                    pass_fds=(fd,),
                    preexec_fn=lambda: os.fchdir(fd),
                )
            except subprocess.TimeoutExpired:
                proc = None
            verdict = judge(r, proc, {}, {})
            if verdict[0] == "clean error" and "damaged" in verdict[1]:
                return "unclear error", "a path too long is called damaged: " + verdict[1]
            if verdict[0] == "clean error" and sorted(os.listdir(fd)) != ["in.sqlite"]:
                return "partial output", f"left {sorted(os.listdir(fd))}"
            return verdict
        finally:
            os.close(fd)

    return run


def url_cases() -> list[Case]:
    known = [
        ("postgresql+psycopg2://u:pw@h/d", "psycopg2"),
        ("mysql://u@h/d", "MySQLdb"),
        ("oracle://u@h/d", "oracledb"),
    ]
    missing = next((u for u, m in known if importlib.util.find_spec(m) is None), None)
    urls = [("unknown-scheme", "nosuchdb://host/x"), ("unparsable", "://x"), ("no-driver", missing)]
    return [
        Case(f"urls/{n}", "URLs", lambda w, u=url: convert_run(u, w, "error")) for n, url in urls if url is not None
    ]


def meta_cases(sample: Path) -> list[Case]:
    """A dataset whose meta holds what no conversion writes there, for summary, trace and plot."""

    def breaker(key: str, value: str | None, cmd: str) -> Callable[[Path], Run]:
        def build(work: Path) -> Run:
            import pyarrow as pa
            import pyarrow.parquet as pq

            ds = work / "in" / "ds"
            subprocess.run(nvbridge("convert", sample, "-o", ds, "-q"), env=env(), check=True, timeout=TIMEOUT)
            meta = pq.read_table(ds / "meta.parquet").to_pydict()
            values = [value if k == key else v for k, v in zip(meta["key"], meta["value"])]
            pq.write_table(pa.table({"key": meta["key"], "value": pa.array(values, pa.string())}), ds / "meta.parquet")
            out = work / "out" / ("t.json" if cmd == "trace" else "p.png")
            argv = nvbridge(cmd, ds) if cmd == "summary" else nvbridge(cmd, ds, "-o", out)
            integer = key in ("rank", "session_start_utc_ns", "capture_end_ns", "rows.ops")
            return Run(argv, "error" if integer and value is not None else "any", [] if cmd == "summary" else [out])

        return build

    keys = ("rank", "session_start_utc_ns", "capture_end_ns", "rows.ops", "time_base", "source", "kind")
    return [
        Case(f"meta/{key}={value}/{cmd}", "meta values", breaker(key, value, cmd))
        for key in keys
        for value in ("abc", "²", None)
        for cmd in ("summary", "trace", "plot")
    ]


def leak_cases(bases: list[Path]) -> list[Case]:
    """Secrets planted where real exports hold them; no output may hold one (dictionary pages read)."""
    return [Case(f"leak/{src.stem}", "dictionaries", _leak(src)) for src in bases]


def _leak(src: Path) -> Callable[[Path], Run]:
    def build(work: Path) -> Run:
        db = copy_to(src, work)
        markers = plant(db)
        out, trace = work / "out" / "ds", work / "out" / "t.json.gz"

        def clean(_proc: subprocess.CompletedProcess[str]) -> str | None:
            found = [m for m in markers for text in output_strings(out, trace) if m in text]
            return f"planted secrets in the outputs: {sorted(set(found))[:3]}" if found else None

        # A capture with nothing in it has no trace: --chrome refuses it (a clean error, no check).
        return Run(nvbridge("convert", db, "-o", out, "--chrome", trace, "-q"), "any", [out, trace], clean)

    return build


def plant(path: Path) -> list[str]:
    """Unreferenced string-table entries and captured environment rows with unique markers."""
    markers = [f"nvbleak{k}{secrets.token_hex(6)}" for k in range(4)]
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        texts = [f"NVB_TOKEN={markers[0]}", f"/home/{markers[1]}/.local/bin"]
        if "StringIds" in tables:
            top = con.execute("SELECT coalesce(max(id), 0) FROM StringIds").fetchone()[0]
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(top + 1000 + k, t) for k, t in enumerate(texts)])
            con.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
            con.execute(
                "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)", (f"K={markers[2]}",)
            )
            con.execute(
                "CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, "
                "name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL)"
            )
            con.execute(
                "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Local', 'DeviceEnvironment', 32, ?)", (markers[3],)
            )
        else:
            con.executemany("INSERT INTO StringTable (value) VALUES (?)", [(t,) for t in texts])
            markers = markers[:2]
        con.commit()
    finally:
        con.close()
    return markers


def output_strings(ds: Path, trace: Path) -> list[str]:
    """Every string of the dataset (each text column's dictionary pages and values) and the trace."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: list[str] = []
    for path in sorted(ds.glob("*.parquet")) if ds.is_dir() else []:
        schema = pq.read_schema(path)
        text = [f.name for f in schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]
        pf = pq.ParquetFile(path, read_dictionary=text)
        for i in range(pf.metadata.num_row_groups):
            for column in pf.read_row_group(i, columns=text).columns:
                for chunk in column.chunks:
                    values = chunk.dictionary if isinstance(chunk, pa.DictionaryArray) else chunk
                    out += [str(v) for v in values.to_pylist() if v is not None]
    if trace.is_file():
        out.append(gzip.decompress(trace.read_bytes()).decode("utf-8", "replace"))
    return out


def kill_cases(sample: Path, other: Path) -> list[Case]:
    return [
        Case(
            "kill/between-renames", "kills between renames", lambda w: Run([]), runner=_between_renames(sample, other)
        ),
        Case("kill/symlinked-force", "kills between renames", lambda w: Run([]), runner=_symlinked(sample, other)),
        Case("kill/plot-while-saving", "kills between renames", lambda w: Run([]), runner=_plot_saving(sample)),
    ]


# The command line with Path.rename held after a rename whose target holds WHEN, or a figure's
# savefig held after writing a few bytes: "held" on stdout, then a long sleep (to be killed).
_HELD = """
import os, pathlib, sys, time
when = os.environ["WHEN"]
rename = pathlib.Path.rename
def held(self, target):
    result = rename(self, target)
    if when and when in str(target):
        print("held", flush=True); time.sleep(120)
    return result
pathlib.Path.rename = held
if not when:
    import matplotlib.figure
    def saving(self, fname, *a, **k):
        fname.write(b"half"); fname.flush(); print("held", flush=True); time.sleep(120)
    matplotlib.figure.Figure.savefig = saving
from nvbridge.cli import main
sys.argv[0] = "nvbridge"
main()
"""


def _kill_held(when: str, *args: str | Path) -> bool:
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", _HELD, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env(), "WHEN": when},
    )
    assert proc.stdout is not None
    t0 = time.monotonic()
    held = proc.stdout.readline() == "held\n" and time.monotonic() - t0 < TIMEOUT
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return held


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(nvbridge(*args), capture_output=True, text=True, timeout=TIMEOUT, env=env())


def _between_renames(sample: Path, other: Path) -> Callable[[Case, Path], tuple[str, str]]:
    def run(case: Case, work: Path) -> tuple[str, str]:
        out = work / "out" / "ds"
        if _run("convert", sample, "-o", out, "-q").returncode:
            return "harness error", "the first conversion failed"
        before = snapshot(out)
        if not _kill_held(".nvbridge-old.", "convert", other, "-o", out, "--force", "-q"):
            return "harness error", "the second conversion never reached its first rename"
        junk = work / "in" / "junk.sqlite"
        junk.write_bytes(b"junk" * 100)
        third = _run("convert", junk, "-o", out, "--force")
        if "Traceback" in third.stderr or "internal error" in third.stderr:
            return "internal error", third.stderr.strip()[-200:]
        left = sorted(p.name for p in out.parent.iterdir())
        if not out.is_dir() or left != ["ds"]:
            return "wrong but silent", f"the dataset was lost (left: {left})"
        after = {k: v for k, v in snapshot(out).items() if k != "meta.parquet"}
        if after != {k: v for k, v in before.items() if k != "meta.parquet"}:
            return "wrong but silent", "the dataset put back differs from the one replaced"
        return "ok", "the replaced dataset was put back by the next run"

    return run


def _symlinked(sample: Path, other: Path) -> Callable[[Case, Path], tuple[str, str]]:
    def run(case: Case, work: Path) -> tuple[str, str]:
        real, link = work / "out" / "real", work / "out" / "link"
        if _run("convert", sample, "-o", real, "-q").returncode:
            return "harness error", "the first conversion failed"
        link.symlink_to(real)
        second = _run("convert", other, "-o", link, "--force", "-q")
        if second.returncode:
            return "wrong refusal", second.stderr.strip()[-200:]
        left = sorted(p.name for p in link.parent.iterdir())
        return ("ok", "written through the link") if left == ["link", "real"] else ("partial output", f"{left}")

    return run


def _plot_saving(sample: Path) -> Callable[[Case, Path], tuple[str, str]]:
    def run(case: Case, work: Path) -> tuple[str, str]:
        out = work / "out"
        if not _kill_held("", "plot", sample, "-o", out / "p.png"):
            return "harness error", "the plot never reached its save"
        second = _run("plot", sample, "-o", out / "q.png")
        if second.returncode:
            return "wrong refusal", second.stderr.strip()[-200:]
        left = sorted(p.name for p in out.iterdir())
        return ("ok", "the killed run's file was removed") if left == ["q.png"] else ("partial output", f"{left}")

    return run
