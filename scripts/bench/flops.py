#!/usr/bin/env python3
"""What the cost columns add to a conversion: nvbridge.engine.costs.flops.cost_columns against the name
parsing it follows, on the same shape-bearing names.

    python -m scripts.bench.flops                  # 2M ranges, 1,000 distinct names
    python -m scripts.bench.flops --rows 500000 --distinct 20000

The names are **synthetic** (``aten::mm, seq = N, op_id = N, sizes = [[m, 64], [64, 32]]``,
made here; sizes with dtypes, as nvbridge's own emit_nvtx writes them), repeated the way a
training loop repeats its ops. Prints each step's best of three and the ratio cost / parse.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from nvbridge.engine import names
from nvbridge.engine.costs.flops import _cost_of_text, cost_columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--distinct", type=int, default=1_000)
    args = parser.parse_args()
    texts = [
        f"aten::mm, seq = {i}, op_id = {i}, sizes = [[{i % 97 + 1}, 64], [64, 32]], dtypes = [bf16, bf16]"
        for i in range(args.distinct)
    ]
    column = pa.array(texts).take(pa.array(np.random.default_rng(0).integers(0, args.distinct, args.rows)))
    parse_s, cost_s = [], []
    for _ in range(3):
        _cost_of_text.cache_clear()  # each round costs every distinct name again
        t0 = time.perf_counter()
        parsed = names.parse(column)
        t1 = time.perf_counter()
        cols = cost_columns(
            parsed.column("op_name").combine_chunks(),
            parsed.column("input_shapes").combine_chunks(),
            parsed.column("input_dtypes").combine_chunks(),
        )
        t2 = time.perf_counter()
        parse_s.append(t1 - t0)
        cost_s.append(t2 - t1)
    assert cols["flops"].null_count == 0
    print(
        f"{args.rows:,} ranges, {args.distinct:,} distinct: parse {min(parse_s):.2f} s, "
        f"cost columns {min(cost_s):.3f} s, cost / parse = {min(cost_s) / min(parse_s):.3f}"
    )


if __name__ == "__main__":
    main()
