#!/usr/bin/env python3
"""nvbridge's compiled extension (native/) under AddressSanitizer and UndefinedBehaviorSanitizer.

    python -m scripts.hostile.sanitize build DIR                  # DIR/_native*.so, instrumented
    python -m scripts.hostile.sanitize run DIR -m pytest tests/test_pages.py   # python ARGS with it

``build`` compiles every native/*.c with ``-fsanitize=address,undefined
-fno-sanitize-recover=all`` (gcc or clang, whichever ``cc`` is) into DIR, outside the tree.
``run`` starts Python with the ASan runtime preloaded (a Python built without ASan needs it
first in the process), puts the instrumented module in place of ``nvbridge._native`` before
anything imports it, then runs ``python ARGS`` (``-m module`` or a script) in that process. Any
out-of-bounds access, use after free, overflow or other undefined behaviour aborts the process
with the sanitizer's report (exit status 1 or SIGABRT). Leak detection is off: CPython keeps
its arenas to the end. tests/test_pages_sanitized.py runs the page reader's tests and a bounded fuzz
this way; scripts/hostile/fuzz_pages.py --sanitize does too.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import sysconfig
from pathlib import Path

from scripts.paths import ROOT

FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
OPTIONS = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:detect_odr_violation=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
_MARK = "NVBRIDGE_SANITIZED"


def compiler() -> str:
    return os.environ.get("CC", "cc")


def build(out: Path, extra: tuple[str, ...] = ()) -> Path:
    """Compile native/ instrumented into ``out`` (``extra``: more flags, e.g. libFuzzer's
    coverage for scripts/hostile/fuzz_pages_raw.py); the extension's path."""
    out.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    objects = []
    for source in sorted((ROOT / "native").glob("*.c")):
        obj = out / (source.stem + ".o")
        cmd = [compiler(), *FLAGS, *extra, "-std=c11", "-fPIC", "-Wall", "-Wextra", f"-I{include}", "-c", str(source)]
        cmd += ["-o", str(obj)]
        subprocess.run(cmd, check=True)
        objects.append(str(obj))
    so = out / f"_native{suffix}"
    subprocess.run([compiler(), *FLAGS, *extra, "-shared", *objects, "-lsqlite3", "-o", str(so)], check=True)
    return so


def runtime() -> str:
    """The ASan runtime's path, for LD_PRELOAD."""
    found = subprocess.run([compiler(), "-print-file-name=libasan.so"], check=True, capture_output=True, text=True)
    return found.stdout.strip()


def environment(so: Path, preload: str | None = None) -> dict[str, str]:
    """The environment a process running the instrumented extension ``so`` starts with
    (``preload``: the sanitizer runtime, by default the compiler's ASan)."""
    return {**os.environ, **OPTIONS, "LD_PRELOAD": preload or runtime(), _MARK: str(so), "PYTHONPATH": str(ROOT)}


def install() -> None:
    """In a process started with :func:`environment`: the instrumented module as nvbridge._native."""
    import importlib.util

    so = os.environ[_MARK]  # in sys.modules before nvbridge is imported: nvbridge.compiled then takes it
    spec = importlib.util.spec_from_file_location("nvbridge._native", so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nvbridge._native"] = module
    spec.loader.exec_module(module)
    import nvbridge.compiled

    assert nvbridge.compiled.native is module, "nvbridge._native was imported before the instrumented one"
    setattr(nvbridge, "_native", module)  # noqa: B010 - the import system sets it only when it loads the module
    _interposed_free()


def _interposed_free() -> None:
    """cxxfilt (nvprof's kernel names) frees __cxa_demangle's result with ``free`` looked up in
    libc itself, past ASan's interposed one: glibc then aborts on ASan's pointer. Give it the
    process's ``free`` (ASan's here), which is what a normal process resolves too."""
    import contextlib
    import ctypes

    with contextlib.suppress(ImportError, AttributeError):
        import cxxfilt

        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        cxxfilt.default_demangler._free = free


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        print(build(Path(argv[1])))
        return 0
    if len(argv) >= 3 and argv[0] == "run":
        so = next(Path(argv[1]).glob("_native*.so"))
        if os.environ.get(_MARK) != str(so):
            cmd = [sys.executable, "-m", "scripts.hostile.sanitize", *argv]
            return subprocess.run(cmd, env=environment(so), cwd=os.getcwd()).returncode
        install()
        args = argv[2:]
        sys.argv = args[1:] if args[0] == "-m" else args
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args[0], run_name="__main__")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
