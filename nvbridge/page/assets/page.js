// nvbridge report page: draws the charts (vegaEmbed, embedded above) and the op table from the
// page's embedded data. Everything is found inside this page's own element, so several pages
// (notebook outputs) can share one document.
(function () {
  "use strict";
  const root = (document.currentScript && document.currentScript.closest(".nvbridge-page")) || document;
  const data = JSON.parse(root.querySelector("script#nvbridge-data").textContent);
  const charts = JSON.parse(root.querySelector("script#nvbridge-charts").textContent);

  // torch's profiler formatting: 1.234ms, 12.000us, 2.500s
  function time(ns) {
    if (ns === null || ns === undefined) return "";
    const us = ns / 1e3;
    if (Math.abs(us) >= 1e6) return (us / 1e6).toFixed(3) + "s";
    if (Math.abs(us) >= 1e3) return (us / 1e3).toFixed(3) + "ms";
    return us.toFixed(3) + "us";
  }
  function si(v) {
    if (v === null || v === undefined) return "";
    const units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [size, u] of units) if (Math.abs(v) >= size) return (v / size).toFixed(2) + " " + u;
    return String(v);
  }
  function fixed(digits) {
    return (v) => (v === null || v === undefined ? "" : Number(v).toFixed(digits));
  }
  function percentOf(key, total) {
    return (r) => (total ? (100 * r[key]) / total : 0);
  }

  // ---- charts -------------------------------------------------------------------------------
  const pending = [];
  for (const [id, spec] of Object.entries(charts)) {
    const el = root.querySelector("#" + id);
    if (!el) continue;
    pending.push(
      vegaEmbed(el, spec, { actions: false, renderer: "svg" }).catch((err) => {
        el.textContent = "This chart could not be drawn: " + err;
        console.error(err);
      })
    );
  }
  Promise.all(pending).then(() => {
    (root === document ? document.body : root).setAttribute("data-charts-drawn", String(pending.length));
  });

  // ---- the op table -------------------------------------------------------------------------
  const table = root.querySelector("#op-table");
  if (!table) return;
  const groupSelect = root.querySelector("#op-group");
  const filterInput = root.querySelector("#op-filter");
  const countOut = root.querySelector("#op-count");
  const tables = data.tables;
  if (tables.name.rows === null) tables.name.rows = data.summary.rows;
  for (const option of Array.from(groupSelect.options)) if (!tables[option.value]) option.remove();
  let state = { group: "name", key: "self_gpu_ns", descending: true, filter: "" };

  // a column no row of the grouping has a value in (FLOPs of a report without shapes) is left out
  function columns(group) {
    const t = tables[group];
    const hasAny = (key) => t.rows.some((r) => r[key] !== null && r[key] !== undefined && r[key] !== "");
    const cpu = t.self_cpu_total_ns, gpu = t.self_gpu_total_ns;
    const cols = [{ key: "name", title: "Name", text: true }];
    if (group === "shape") cols.push({ key: "input_shapes", title: "Input Shapes", text: true });
    if (group === "module") cols.push({ key: "module_path", title: "Module", text: true });
    return cols.concat([
      { key: "self_cpu_pct", title: "Self CPU %", value: percentOf("self_cpu_ns", cpu), fmt: fixed(2) },
      { key: "self_cpu_ns", title: "Self CPU", fmt: time },
      { key: "cpu_total_pct", title: "CPU total %", value: percentOf("cpu_total_ns", cpu), fmt: fixed(2) },
      { key: "cpu_total_ns", title: "CPU total", fmt: time },
      { key: "cpu_avg_ns", title: "CPU time avg", fmt: time },
      { key: "self_gpu_ns", title: "Self CUDA", fmt: time },
      { key: "self_gpu_pct", title: "Self CUDA %", value: percentOf("self_gpu_ns", gpu), fmt: fixed(2) },
      { key: "gpu_total_ns", title: "CUDA total", fmt: time },
      { key: "gpu_avg_ns", title: "CUDA time avg", fmt: time },
      { key: "calls", title: "# of Calls", fmt: (v) => String(v) },
      { key: "flops", title: "FLOPs", fmt: si },
      { key: "achieved_tflops", title: "TFLOP/s", fmt: fixed(3) },
      { key: "pct_of_peak", title: "% of peak", fmt: fixed(1) },
      { key: "bound", title: "Bound", text: true },
      { key: "compute_dtype", title: "Dtype", text: true },
    ]).filter((c) => c.value || c.key === "name" || hasAny(c.key));
  }

  function valueOf(col, row) {
    return col.value ? col.value(row) : row[col.key];
  }

  function matcher(text) {
    if (!text) return () => true;
    try {
      const re = new RegExp(text, "i");
      return (name) => re.test(name);
    } catch (e) {
      const low = text.toLowerCase();
      return (name) => name.toLowerCase().includes(low);
    }
  }

  function render() {
    const cols = columns(state.group);
    const col = cols.find((c) => c.key === state.key) || cols.find((c) => c.key === "self_gpu_ns");
    const keep = matcher(state.filter);
    const rows = tables[state.group].rows.filter((r) => keep(String(r.name)));
    const sign = state.descending ? -1 : 1;
    rows.sort((a, b) => {
      const x = valueOf(col, a), y = valueOf(col, b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1; // unknown last, either way
      if (y === null || y === undefined) return -1;
      return (col.text ? String(x).localeCompare(String(y)) : x - y) * sign;
    });
    const head = document.createElement("tr");
    for (const c of cols) {
      const th = document.createElement("th");
      th.scope = "col";
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = c.title;
      button.dataset.key = c.key;
      button.addEventListener("click", () => {
        state.descending = state.key === c.key ? !state.descending : !c.text;
        state.key = c.key;
        render();
      });
      th.appendChild(button);
      if (c.key === col.key) th.setAttribute("aria-sort", state.descending ? "descending" : "ascending");
      head.appendChild(th);
    }
    table.tHead.replaceChildren(head);
    const body = document.createDocumentFragment();
    for (const r of rows) {
      const tr = document.createElement("tr");
      for (const c of cols) {
        const cell = document.createElement(c.key === "name" ? "th" : "td");
        if (c.key === "name") cell.scope = "row";
        const v = valueOf(c, r);
        cell.textContent = c.fmt ? c.fmt(v) : v === null || v === undefined ? "" : String(v);
        if (!c.text) cell.className = "num";
        tr.appendChild(cell);
      }
      body.appendChild(tr);
    }
    table.tBodies[0].replaceChildren(body);
    const left = tables[state.group].left_out;
    countOut.textContent =
      rows.length + " rows" + (left && left.rows ? " (" + left.rows + " smaller rows left out of the page)" : "");
  }

  groupSelect.addEventListener("change", () => {
    state.group = groupSelect.value;
    render();
  });
  filterInput.addEventListener("input", () => {
    state.filter = filterInput.value;
    render();
  });
  render();
})();
