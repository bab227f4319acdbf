"""Running and timing what scripts/bench_convert.py measures, and the inputs it measures on.

Each command runs in a small launcher that times it (wall, CPU) with its own peak RSS; the tiled
database is built once into the cache (scripts/bench/large_db.py), the baseline is a git archive of
a revision, the out-of-order copy is built once beside the database.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import large_db as make_large_db

ROOT = Path(__file__).resolve().parent.parent.parent

DEFAULT_SOURCE = ROOT.parent / "shared" / "real_db" / "nsys-2026.2-pytorch2-fsdp-2gpu.sqlite"
DEFAULT_NVPROF = ROOT.parent / "shared" / "real_db" / "nvprof-2020-pytorch14-pyprof-lm.sqlite"
DEFAULT_CACHE = ROOT / "bench_out"
FLOOR = "floor (sqlite3 loop)"
RAW = "raw read (ConnectorX)"
DISORDERED = "convert, NVTX out of order"
BASELINE = "convert at baseline"
TWO_GB = 2048.0

FLOOR_CODE = """
import json, sqlite3, sys
conn = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
n = 0
for sql in json.loads(sys.argv[2]):
    for _row in conn.execute(sql):
        n += 1
print(n)
"""

# The read a conversion cannot beat: exactly the columns it needs, straight into Arrow through
# ConnectorX (nvbridge's own bulk path), two queries at a time on the 2 cores.
RAW_CODE = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
import connectorx as cx
url = "sqlite://" + sys.argv[1]
with ThreadPoolExecutor(2) as pool:
    tables = list(pool.map(lambda q: cx.read_sql(url, q, return_type="arrow"), json.loads(sys.argv[2])))
print(sum(t.num_rows for t in tables))
"""


@dataclass
class Run:
    tool: str
    wall: float
    cpu: float
    rss_mb: float
    note: str = ""
    timed_out: bool = False


def floor_queries(db: Path) -> list[str]:
    """SELECTs of exactly the raw columns nvbridge's reader reads, table by table."""
    import sqlite3

    from nvbridge.readers import nsys_tables as nsys
    from nvbridge.readers import nvprof
    from nvbridge.readers._column import Column

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    kind = make_large_db.detect_kind(conn)
    k = make_large_db.K
    if kind == "nsys":
        wanted = (*nsys.RANGE_TYPES, nsys.NVTX_MARK, nsys.NVTX_THREAD_NAME, nsys.NVTX_DOMAIN_CREATE)
        specs = [
            ("StringIds", [Column("id", "id"), Column("value", "value")], ""),
            ("NVTX_EVENTS", nsys.NVTX, f" WHERE eventType IN ({', '.join(map(str, wanted))})"),
            (k + "RUNTIME", nsys.RUNTIME, ""),
            (k + "KERNEL", nsys.KERNEL, ""),
            (k + "MEMCPY", nsys.MEMCPY, ""),
            (k + "MEMSET", nsys.MEMSET, ""),
            (k + "SYNCHRONIZATION", nsys.SYNC, ""),
            (k + "GRAPH_TRACE", nsys.GRAPH_TRACE, ""),
        ]
    else:
        specs = [
            ("StringTable", [Column("id", "_id_"), Column("value", "value")], ""),
            (k + "MARKER", nvprof.MARKER, ""),
            (k + "RUNTIME", nvprof.API, ""),
            (k + "DRIVER", nvprof.API, ""),
            (k + "CONCURRENT_KERNEL", nvprof.KERNEL, ""),
            (k + "KERNEL", nvprof.KERNEL, ""),
            (k + "MEMCPY", nvprof.MEMCPY, ""),
            (k + "MEMCPY2", nvprof.MEMCPY, ""),
            (k + "MEMSET", nvprof.MEMSET, ""),
            (k + "SYNCHRONIZATION", nvprof.SYNC, ""),
        ]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    queries = []
    for table, cols, where in specs:
        if table not in tables:
            continue
        present = set(make_large_db.table_columns(conn, table))
        names = [c.raw for c in cols if c.raw in present]
        q = make_large_db.quote
        queries.append(f"SELECT {', '.join(q(n) for n in names)} FROM {q(table)}{where}")
    conn.close()
    return queries


# Each measured command is started by this small launcher, not by the benchmark itself: a
# child's ru_maxrss includes the memory it had between fork and exec, which would be the
# benchmark's own (nvbridge and pyarrow imported) rather than the command's.
LAUNCHER_CODE = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_pid, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "wall": wall,
               "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss}, fh)
"""


def run(
    tool: str, cmd: list[str], stdout: Path, timeout: float | None = None, env: dict[str, str] | None = None
) -> tuple[Run, int, str]:
    """Run ``cmd``: wall time, user+sys CPU and peak RSS of it and the children it reaped.

    Past ``timeout`` seconds the launcher and the command (one process group) are killed and
    the Run comes back with ``timed_out`` set.
    """
    usage = stdout.with_suffix(".usage.json")
    with stdout.open("wb") as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER_CODE, str(usage), *cmd],
            stdout=out,
            stderr=err,
            start_new_session=True,
            env=env,
            # Not the repository: `python -m` puts the working directory before PYTHONPATH, so a
            # baseline run from the checkout would time this tree's code instead.
            cwd=stdout.parent,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            usage.unlink(missing_ok=True)
            return (
                Run(
                    tool,
                    float(timeout or 0),
                    float("nan"),
                    float("nan"),
                    f"timeout (killed after {timeout:.0f} s)",
                    timed_out=True,
                ),
                -1,
                "timeout",
            )
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        err.seek(0)
        errors = err.read().decode(errors="replace")
    u = json.loads(usage.read_text())
    usage.unlink()
    return Run(tool, u["wall"], u["cpu"], u["maxrss_kb"] / 1024), u["rc"], errors


def compile_package() -> str:
    """Byte-compile the nvbridge the subprocesses import, as ``pip install .`` does. An editable
    install under PYTHONDONTWRITEBYTECODE (this machine's setting) would otherwise recompile
    every changed module in every timed run: 0.1 s that no installed copy pays."""
    import compileall

    import nvbridge

    package = Path(nvbridge.__file__).parent
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit(f"{package}: byte-compiling failed")
    return str(package)


def warm(path: Path) -> None:
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass


def cached_db(source: Path, nvtx_target: int, cache: Path) -> tuple[Path, int]:
    import sqlite3

    conn = sqlite3.connect(f"file:{source.resolve()}?mode=ro", uri=True)
    kind = make_large_db.detect_kind(conn)
    per_tile = make_large_db.nvtx_rows(conn, kind)
    conn.close()
    if not per_tile:
        raise SystemExit(f"{source.name} has no NVTX rows to scale")
    tiles = -(-nvtx_target // per_tile)
    db = cache / f"{source.stem}.x{tiles}.sqlite"
    if db.exists():
        print(f"using cached {db} ({db.stat().st_size / 1e6:.0f} MB)")
    else:
        make_large_db.build(source, db, tiles=tiles)
    return db, tiles


def baseline_checkout(rev: str, into: Path) -> Path:
    """The repository at ``rev``, exported (``git archive``) into ``into``, its compiled loops
    built as an install builds them (without them the baseline would time the NumPy fallbacks)
    and byte-compiled."""
    import compileall
    import io
    import tarfile

    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    if (into / "native").is_dir():
        build = [sys.executable, "setup.py", "build_ext", "--inplace", "-q"]
        subprocess.run(build, cwd=into, check=True, capture_output=True)
    compileall.compile_dir(into / "nvbridge", quiet=1)
    return into


def disordered_db(db: Path) -> Path:
    """A copy of ``db`` whose NVTX rows are stored out of start order, as two start-ordered runs
    one after the other (odd rowids, then even): rowid windows cannot stream it, so convert reads
    it in slabs of starts (issue 19). Built once beside ``db`` and reused."""
    import sqlite3

    out = db.with_name(db.stem + ".two-runs.sqlite")
    if out.exists():
        return out
    tmp = out.with_suffix(".partial")
    shutil.copyfile(db, tmp)
    con = sqlite3.connect(tmp)
    con.executescript("""
        CREATE TABLE n2 AS SELECT * FROM NVTX_EVENTS ORDER BY rowid % 2, rowid;
        DELETE FROM NVTX_EVENTS; INSERT INTO NVTX_EVENTS SELECT * FROM n2; DROP TABLE n2; VACUUM;""")
    con.close()
    tmp.rename(out)
    return out
