"""``import nvbridge`` changes nothing and loads only what is used (issue 26).

Each check runs in a fresh interpreter: this process has long since loaded everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_import_nvbridge_sets_nothing_and_loads_no_arrow() -> None:
    done = _run(
        """
        import json, os, sys
        before = dict(os.environ)
        import nvbridge
        nvbridge.NvbridgeError, nvbridge.__version__
        changed = {k: v for k, v in os.environ.items() if before.get(k) != v}
        heavy = sorted({m.partition(".")[0] for m in sys.modules} & {"pyarrow", "numpy", "torch", "pandas"})
        ours = sorted(m for m in sys.modules if m.startswith("nvbridge"))
        print(json.dumps([changed, heavy, ours]))
        """
    )
    assert done.returncode == 0, done.stderr
    changed, heavy, ours = json.loads(done.stdout)
    assert changed == {}
    assert heavy == []
    assert ours == ["nvbridge", "nvbridge._version", "nvbridge.errors"]


def test_annotating_loads_no_arrow() -> None:
    """A training script that only annotates: emit_nvtx loads torch, never pyarrow."""
    done = _run(
        """
        import sys
        import nvbridge
        nvbridge.emit_nvtx
        print("pyarrow" in sys.modules, "torch" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_emit_nvtx_without_torch_is_missing_dependency() -> None:
    done = _run(
        """
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import nvbridge
        for name in ("emit_nvtx", "load_nvprof"):
            try:
                getattr(nvbridge, name)(*(("x.sqlite",) if name == "load_nvprof" else ()))
            except nvbridge.MissingDependency as exc:
                print(name, "pip install" in str(exc))
            except BaseException as exc:
                print(name, type(exc).__name__)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["emit_nvtx True", "load_nvprof True"]


def test_the_command_sets_the_allocator_before_arrow_loads() -> None:
    """The command line owns its process: it sets MIMALLOC_PURGE_DELAY, before pyarrow reads it."""
    done = _run(
        """
        import importlib.abc, os, sys

        class Watch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "pyarrow":
                    sys.stderr.write(f"pyarrow loads with {os.environ.get('MIMALLOC_PURGE_DELAY')!r}\\n")
                    sys.meta_path.remove(self)
                return None

        sys.meta_path.insert(0, Watch())
        sys.argv = ["nvbridge", "--version"]
        from nvbridge.__main__ import main
        main()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pyarrow loads with '0'" in done.stderr.splitlines()
