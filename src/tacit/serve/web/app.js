// The page of `tacit serve`: trace search, the waterfall of a reconstructed trace with each
// link's probability of being right and its alternatives, the service dependency graph, the
// per-service confidence (the mean probability of its links) and the latency charts (Pirate's response latency per server, RDA's
// one-way latency per interval). It reads only the Jaeger query API and /api/tacit/*; no build
// step.
//
// Stable hooks for tests: #trace-list tr[data-trace-id], #waterfall .span-row[data-span-id]
// (data-depth, data-parent-id), .link-score[data-score][data-probability], .unmapped[data-reason],
// #dependencies svg .edge[data-parent][data-child][data-calls], #confidence tr[data-service],
// #response-latency svg .point[data-server][data-epoch-ms][data-latency-ns],
// #oneway-latency svg .point[data-source][data-role][data-interval][data-mean-ns][data-std-ns],
// #oneway-latency svg .gap[data-status]; body[data-latency-drawn] counts the charts' refreshes
// (every LATENCY_REFRESH_MS).
// #trace-list tr[data-probability].
// The search state lives in the address (?service=&operation=&lookback=&minDuration=&limit=
// &minProbability=&trace=), so a search can be linked to; the mark "trace-list-drawn" (performance timeline)
// and body[data-traces-drawn] tell when a result list has been drawn.

const SVG = "http://www.w3.org/2000/svg";
const LOOKBACK_MS = { "1h": 1, "2h": 2, "6h": 6, "12h": 12, "24h": 24, "2d": 48, "7d": 168 };

const $ = (sel) => document.querySelector(sel);

/** An element with attributes (className, dataset, title, style, other attributes) and children. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "className") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== undefined && c !== null && c !== false) node.append(c);
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

async function api(path) {
  const response = await fetch(path);
  let doc;
  try {
    doc = await response.json();
  } catch {
    throw new Error(`${path}: ${response.status} ${response.statusText}`);
  }
  if (!response.ok || (doc.errors && doc.errors.length)) {
    const msg = doc.errors && doc.errors.length ? doc.errors[0].msg : response.statusText;
    throw new Error(msg);
  }
  return doc;
}

// -- formatting -------------------------------------------------------------------------------

/** A duration given in microseconds (Jaeger's unit). */
function fmtDuration(us) {
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${Math.round(us)} µs`;
}

function fmtStart(us) {
  const d = new Date(us / 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`
  );
}

const fmtScore = (x) => (x === null || x === undefined ? "—" : x.toFixed(2));
const fmtPercent = (p) => (p === null || p === undefined ? "—" : `${(100 * p).toFixed(p >= 0.995 && p < 1 ? 1 : 0)}%`);
/** The class that colours a probability: sure (>= 0.9), unsure (>= 0.5) or doubtful. */
const sureness = (p) => (p === null || p === undefined ? "" : p >= 0.9 ? "sure" : p >= 0.5 ? "unsure" : "doubtful");

const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const serviceIndex = new Map();

/** A colour per service, the same in the waterfall and the graph: by the service's place in
 * the list of services, so that a handful of services get distinct colours. */
function colour(service) {
  let i = serviceIndex.get(service);
  if (i === undefined) {
    i = 0;
    for (let k = 0; k < service.length; k++) i = (i * 31 + service.charCodeAt(k)) >>> 0;
  }
  return PALETTE[i % PALETTE.length];
}

// -- traces as the page needs them ------------------------------------------------------------

function tagsOf(span) {
  const out = {};
  for (const t of span.tags || []) out[t.key] = t.value;
  return out;
}

function parentOf(span) {
  const ref = (span.references || []).find((r) => r.refType === "CHILD_OF") || (span.references || [])[0];
  return ref ? ref.spanID : null;
}

/** Root name, start, duration, span count, probability (tacit.trace_probability of its root)
 * and lowest tacit.score of a trace document. */
function summarize(trace) {
  const spans = trace.spans;
  const ids = new Set(spans.map((s) => s.spanID));
  let start = Infinity;
  let end = -Infinity;
  let root = null;
  let minScore = null;
  let unmapped = 0;
  let probability = null;
  for (const s of spans) {
    start = Math.min(start, s.startTime);
    end = Math.max(end, s.startTime + s.duration);
    const p = parentOf(s);
    if ((p === null || !ids.has(p)) && (root === null || s.startTime < root.startTime)) root = s;
    for (const t of s.tags || []) {
      if (t.key === "tacit.score" && (minScore === null || t.value < minScore)) minScore = t.value;
      else if (t.key === "tacit.unmapped") unmapped += 1;
      else if (t.key === "tacit.trace_probability" && (p === null || !ids.has(p))) probability = t.value;
    }
  }
  const proc = trace.processes[root.processID];
  return {
    id: trace.traceID,
    service: proc ? proc.serviceName : "?",
    operation: root.operationName,
    name: `${proc ? proc.serviceName : "?"} ${root.operationName}`,
    start,
    duration: end - start,
    spans: spans.length,
    minScore,
    probability,
    unmapped,
  };
}

// -- search -----------------------------------------------------------------------------------

const list = { rows: [], sort: null, desc: false, selected: null };
let servicesReady = Promise.resolve();

function formParams() {
  const q = new URLSearchParams();
  q.set("service", $("#service").value);
  if ($("#operation").value) q.set("operation", $("#operation").value);
  if ($("#lookback").value) q.set("lookback", $("#lookback").value);
  const minDuration = $("#min-duration").value.trim();
  if (minDuration) q.set("minDuration", minDuration);
  const minSure = $("#min-probability").value.trim();
  if (minSure) q.set("minProbability", String(Number(minSure) / 100));
  q.set("limit", $("#limit").value || "20");
  return q;
}

async function search(q) {
  const error = $("#search-error");
  error.hidden = true;
  $("#result-summary").textContent = "Searching…";
  let doc;
  try {
    doc = await api(`/api/traces?${q}`);
  } catch (e) {
    error.textContent = e.message;
    error.hidden = false;
    $("#result-summary").textContent = "";
    return;
  }
  list.rows = doc.data.map(summarize);
  await servicesReady; // for the colours
  list.sort = null;
  for (const th of document.querySelectorAll("#trace-list th")) th.removeAttribute("aria-sort");
  drawList();
}

function drawList() {
  const body = document.createElement("tbody");
  const frag = document.createDocumentFragment();
  for (const r of list.rows) {
    const tr = el(
      "tr",
      {
        dataset: { traceId: r.id, spans: r.spans, minScore: r.minScore ?? "", probability: r.probability ?? "" },
        tabindex: "0",
        className: r.id === list.selected ? "selected" : null,
      },
      el(
        "td",
        {},
        el("span", { className: "svc-dot", style: `background:${colour(r.service)}` }),
        el("b", {}, r.service),
        ` ${r.operation}`,
        r.unmapped ? el("span", { className: "badge unmapped" }, `${r.unmapped} unmapped`) : null,
      ),
      el("td", { title: fmtStart(r.start) }, fmtStart(r.start).slice(11)),
      el("td", { className: "num" }, fmtDuration(r.duration)),
      el("td", { className: "num" }, String(r.spans)),
      el("td", { className: `num ${sureness(r.probability)}` }, fmtPercent(r.probability)),
      el("td", { className: "num" }, fmtScore(r.minScore)),
    );
    frag.append(tr);
  }
  body.append(frag);
  $("#trace-list tbody").replaceWith(body);
  const n = list.rows.length;
  $("#result-summary").textContent = n === 1 ? "1 trace" : `${n} traces`;
  // Drawn once the frame holding the rows has been painted: after the next animation frame.
  requestAnimationFrame(() =>
    setTimeout(() => {
      performance.mark("trace-list-drawn");
      document.body.dataset.tracesDrawn = String(n);
    }),
  );
}

function sortBy(key) {
  list.desc = list.sort === key ? !list.desc : key === "duration" || key === "start" || key === "spans";
  list.sort = key;
  const sign = list.desc ? -1 : 1;
  list.rows.sort((a, b) => {
    const x = a[key] ?? Infinity;
    const y = b[key] ?? Infinity;
    return (x < y ? -1 : x > y ? 1 : 0) * sign;
  });
  for (const th of document.querySelectorAll("#trace-list th")) {
    if (th.dataset.sort === key) th.setAttribute("aria-sort", list.desc ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
  drawList();
}

async function loadServices(wanted) {
  const select = $("#service");
  let services;
  try {
    services = (await api("/api/services")).data;
  } catch (e) {
    $("#search-error").textContent = `services: ${e.message}`;
    $("#search-error").hidden = false;
    return;
  }
  services.forEach((s, i) => serviceIndex.set(s, i));
  const frag = document.createDocumentFragment();
  for (const s of services) frag.append(el("option", { value: s }, s));
  select.replaceChildren(frag);
  if (wanted && services.includes(wanted)) select.value = wanted;
  select.dataset.loaded = "true";
}

async function loadOperations(service, wanted) {
  const select = $("#operation");
  delete select.dataset.loaded;
  let ops = [];
  try {
    if (service) ops = (await api(`/api/services/${encodeURIComponent(service)}/operations`)).data;
  } catch (e) {
    $("#search-error").textContent = `operations of ${service}: ${e.message}`;
    $("#search-error").hidden = false;
  }
  const frag = document.createDocumentFragment();
  frag.append(el("option", { value: "" }, "all"));
  for (const o of ops) frag.append(el("option", { value: o }, o));
  select.replaceChildren(frag);
  if (wanted && ops.includes(wanted)) select.value = wanted;
  select.dataset.loaded = service;
}

// -- waterfall --------------------------------------------------------------------------------

async function openTrace(id) {
  list.selected = id;
  for (const tr of document.querySelectorAll("#trace-list tr.selected")) tr.classList.remove("selected");
  const row = document.querySelector(`#trace-list tr[data-trace-id="${CSS.escape(id)}"]`);
  if (row) row.classList.add("selected");
  const q = new URLSearchParams(location.search);
  q.set("trace", id);
  history.replaceState(null, "", `?${q}`);
  let doc;
  try {
    doc = await api(`/api/traces/${encodeURIComponent(id)}`);
  } catch (e) {
    $("#trace-header").replaceChildren(el("p", { className: "error" }, `trace ${id}: ${e.message}`));
    $("#waterfall").replaceChildren();
    return;
  }
  drawWaterfall(doc.data[0]);
}

/** Spans in depth-first order (children by start), each with its depth in the trace. */
function treeOrder(spans) {
  const ids = new Set(spans.map((s) => s.spanID));
  const children = new Map();
  const roots = [];
  for (const s of spans) {
    const p = parentOf(s);
    if (p !== null && ids.has(p) && p !== s.spanID) {
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(s);
    } else roots.push(s);
  }
  const byStart = (a, b) => a.startTime - b.startTime;
  const out = [];
  const seen = new Set();
  const stack = roots.sort(byStart).reverse().map((s) => [s, 0]);
  while (stack.length) {
    const [s, depth] = stack.pop();
    if (seen.has(s.spanID)) continue;
    seen.add(s.spanID);
    out.push([s, depth]);
    const kids = (children.get(s.spanID) || []).sort(byStart);
    for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], depth + 1]);
  }
  // A cycle of references leaves spans unreached: shown as roots rather than hidden.
  for (const s of spans) if (!seen.has(s.spanID)) out.push([s, 0]);
  return out;
}

function drawWaterfall(trace) {
  const sum = summarize(trace);
  const byId = new Map(trace.spans.map((s) => [s.spanID, s]));
  const serviceOf = (s) => (trace.processes[s.processID] || {}).serviceName || "?";
  const services = new Set(trace.spans.map(serviceOf));
  $("#trace-header").replaceChildren(
    el("h2", {}, sum.name, " ", el("span", { className: "hint" }, trace.traceID)),
    el(
      "div",
      { className: "facts" },
      `${fmtStart(sum.start)} · ${fmtDuration(sum.duration)} · ${sum.spans} spans · ` +
        `${services.size} services · ${fmtPercent(sum.probability)} sure · lowest score ${fmtScore(sum.minScore)}` +
        (sum.unmapped ? ` · ${sum.unmapped} unmapped` : ""),
    ),
  );
  const total = Math.max(sum.duration, 1);
  const ticks = el("div", { className: "ticks" });
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    ticks.append(el("span", { style: `left:${f * 100}%` }, fmtDuration(f * total)));
  }
  const frag = document.createDocumentFragment();
  frag.append(el("div", { className: "axis" }, el("div", {}, "Service and operation"), ticks));
  for (const [s, depth] of treeOrder(trace.spans)) {
    const tags = tagsOf(s);
    const service = serviceOf(s);
    const left = ((s.startTime - sum.start) / total) * 100;
    const width = (s.duration / total) * 100;
    const alternatives = tags["tacit.alternatives"] ? JSON.parse(tags["tacit.alternatives"]) : [];
    const label = el(
      "div",
      { className: "span-label", style: `padding-left:${4 + depth * 14}px` },
      el("span", { className: "toggle" }, "▸"),
      el("span", { className: "svc-dot", style: `background:${colour(service)}` }),
      el("b", {}, service),
      " ",
      el("span", { className: "op" }, s.operationName),
      tags["span.kind"] ? el("span", { className: "badge kind" }, tags["span.kind"]) : null,
    );
    if (tags["tacit.score"] !== undefined) {
      const p = tags["tacit.probability"];
      const names = alternatives.map(
        ([id, score, share]) => `${describe(byId.get(id), serviceOf, id)}: score ${fmtScore(score)}, ${fmtPercent(share)} of the candidates`,
      );
      label.append(
        el(
          "span",
          {
            className: `badge score link-score ${sureness(p)}`,
            dataset: { score: tags["tacit.score"], probability: p ?? "", alternatives: alternatives.length },
            title: `parent ${fmtPercent(p)} sure, chosen with score ${fmtScore(tags["tacit.score"])}; candidates, best first:\n${names.join("\n")}`,
          },
          `${fmtPercent(p)} sure` + (alternatives.length > 1 ? ` · ${alternatives.length} candidates` : ""),
        ),
      );
    }
    if (tags["tacit.unmapped"] !== undefined) {
      label.append(
        el(
          "span",
          { className: "badge unmapped", dataset: { reason: tags["tacit.unmapped"] }, title: tags["tacit.unmapped"] },
          `unmapped: ${tags["tacit.unmapped"]}`,
        ),
      );
    }
    if (tags["tacit.fallback"] !== undefined) {
      label.append(el("span", { className: "badge fallback", title: tags["tacit.fallback"] }, "fallback"));
    }
    const bar = el(
      "div",
      {
        className: `span-bar${left + width > 85 ? " right" : ""}`,
        style: `left:${left}%;width:${width}%;background:${colour(service)}`,
      },
      el("span", { className: "dur" }, fmtDuration(s.duration)),
    );
    frag.append(
      el(
        "div",
        {
          className: "span-row",
          dataset: { spanId: s.spanID, depth, parentId: parentOf(s) ?? "", service },
          tabindex: "0",
        },
        label,
        el("div", { className: "span-timeline" }, bar),
      ),
    );
  }
  const box = $("#waterfall");
  box.replaceChildren(frag);
  box.trace = { byId, serviceOf, start: sum.start };
}

function describe(span, serviceOf, id) {
  return span ? `${serviceOf(span)} ${span.operationName} (${id})` : `${id} (in another trace)`;
}

/** Open or close the details of a span row: its link's alternatives, or why it has none. */
function toggleSpan(row) {
  const next = row.nextElementSibling;
  if (next && next.classList.contains("span-detail")) {
    next.remove();
    row.classList.remove("open");
    row.querySelector(".toggle").textContent = "▸";
    return;
  }
  const { byId, serviceOf, start } = $("#waterfall").trace;
  const span = byId.get(row.dataset.spanId);
  const tags = tagsOf(span);
  const detail = el("div", { className: "span-detail", dataset: { spanId: span.spanID } });
  detail.append(el("div", {}, `span ${span.spanID} · starts at +${fmtDuration(span.startTime - start)} · lasts ${fmtDuration(span.duration)}`));
  if (tags["tacit.unmapped"] !== undefined) {
    detail.append(el("div", { className: "reason" }, `No parent: ${tags["tacit.unmapped"]}`));
  }
  if (tags["tacit.fallback"] !== undefined) {
    detail.append(el("div", { className: "reason" }, `Parent given by the fallback: ${tags["tacit.fallback"]}`));
  }
  if (tags["tacit.alternatives"]) {
    const parent = parentOf(span);
    const body = el("tbody");
    JSON.parse(tags["tacit.alternatives"]).forEach(([id, score, share], i) => {
      body.append(
        el(
          "tr",
          { className: `alternative${id === parent ? " chosen" : ""}`, dataset: { parentId: id ?? "", score, share: share ?? "" } },
          el("td", {}, String(i + 1)),
          el("td", {}, describe(byId.get(id), serviceOf, id)),
          el("td", {}, fmtPercent(share)),
          el("td", {}, fmtScore(score)),
          el("td", {}, id === parent ? "chosen" : ""),
        ),
      );
    });
    detail.append(
      el("div", {}, "Candidate parents, best first:"),
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, ...["#", "Parent", "Share", "Score", ""].map((h) => el("th", {}, h)))),
        body,
      ),
    );
  }
  const other = Object.entries(tags).filter(([k]) => !k.startsWith("tacit.alternatives"));
  detail.append(
    el(
      "table",
      { className: "tags" },
      el("tbody", {}, ...other.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, String(v))))),
    ),
  );
  row.after(detail);
  row.classList.add("open");
  row.querySelector(".toggle").textContent = "▾";
}

// -- dependency graph -------------------------------------------------------------------------

/** Columns by longest path from the services nobody calls (a cycle is cut where it closes). */
function layers(nodes, links) {
  const out = new Map(nodes.map((n) => [n, []]));
  const called = new Set(links.map((l) => l.child));
  for (const l of links) out.get(l.parent).push(l.child);
  const layer = new Map();
  const open = new Set();
  const visit = (n, depth) => {
    if (open.has(n) || (layer.has(n) && layer.get(n) >= depth)) return;
    layer.set(n, depth);
    open.add(n);
    for (const c of out.get(n)) visit(c, depth + 1);
    open.delete(n);
  };
  for (const n of nodes) if (!called.has(n)) visit(n, 0);
  for (const n of nodes) if (!layer.has(n)) visit(n, 0);
  return layer;
}

/** A layered drawing (Sugiyama's scheme, simplified): services in columns, an edge that skips
 * columns routed through a free slot in each column it crosses, each column ordered by the
 * mean position of its neighbours in a few sweeps so that edges cross little. */
function layout(nodes, links) {
  const layer = layers(nodes, links);
  const columns = [];
  const place = (id, c) => (columns[c] ||= []).push(id);
  for (const n of nodes) place(n, layer.get(n));
  const up = new Map();
  const down = new Map();
  const link = (a, b) => {
    (down.get(a) || down.set(a, []).get(a)).push(b);
    (up.get(b) || up.set(b, []).get(b)).push(a);
  };
  const routes = links.map((l, i) => {
    const from = layer.get(l.parent);
    const to = layer.get(l.child);
    if (to <= from) return null; // drawn as an arc under the boxes
    const path = [l.parent];
    for (let c = from + 1; c < to; c++) {
      const slot = `\u0000${i}:${c}`;
      place(slot, c);
      path.push(slot);
    }
    path.push(l.child);
    for (let k = 1; k < path.length; k++) link(path[k - 1], path[k]);
    return path;
  });
  const index = new Map();
  const number = () => columns.forEach((col) => col.forEach((id, j) => index.set(id, j)));
  const mean = (ids) => (ids && ids.length ? ids.reduce((s, id) => s + index.get(id), 0) / ids.length : null);
  const order = (col, neighbours) => {
    const key = new Map(col.map((id) => [id, mean(neighbours.get(id)) ?? index.get(id)]));
    col.sort((a, b) => key.get(a) - key.get(b));
    col.forEach((id, j) => index.set(id, j));
  };
  number();
  for (let sweep = 0; sweep < 4; sweep++) {
    for (let c = 1; c < columns.length; c++) order(columns[c], up);
    for (let c = columns.length - 2; c >= 0; c--) order(columns[c], down);
  }
  return { layer, columns, routes };
}

function drawDependencies(links) {
  const box = $("#dependencies-graph");
  if (!links.length) {
    box.replaceChildren(el("p", { className: "hint" }, "No calls between services in this time range."));
    return;
  }
  const nodes = [...new Set(links.flatMap((l) => [l.parent, l.child]))].sort();
  const { layer, columns, routes } = layout(nodes, links);
  const W = 130;
  const H = 30;
  const GX = 110;
  const GY = 26;
  const tallest = Math.max(...columns.map((c) => c.length));
  const height = tallest * (H + GY) + GY + (routes.includes(null) ? 60 : 0); // arcs of back edges
  const width = columns.length * (W + GX) - GX + 40;
  const pos = new Map();
  columns.forEach((col, c) =>
    col.forEach((id, j) => pos.set(id, { x: 20 + c * (W + GX), y: GY + (tallest - col.length) * ((H + GY) / 2) + j * (H + GY) })),
  );
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "service dependency graph" });
  const marker = svg("marker", {
    id: "arrow",
    viewBox: "0 0 10 10",
    refX: 10,
    refY: 5,
    markerWidth: 9,
    markerHeight: 9,
    markerUnits: "userSpaceOnUse",
    orient: "auto-start-reverse",
  });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a94a6" }));
  const defs = svg("defs");
  defs.append(marker);
  root.append(defs);
  const maxCalls = Math.max(...links.map((l) => l.callCount));
  const edges = svg("g", { class: "edges" });
  links.forEach((l, i) => {
    let d;
    let mid;
    const route = routes[i];
    if (route) {
      // Through each slot on the way: a curve into its left side, a line across it.
      const a = pos.get(route[0]);
      let at = [a.x + W, a.y + H / 2];
      d = `M${at}`;
      const beziers = [];
      for (let k = 1; k < route.length; k++) {
        const b = pos.get(route[k]);
        const to = [b.x, b.y + H / 2];
        const dx = (to[0] - at[0]) / 2;
        beziers.push([at, [at[0] + dx, at[1]], [to[0] - dx, to[1]], to]);
        d += ` C${[at[0] + dx, at[1]]} ${[to[0] - dx, to[1]]} ${to}`;
        if (k < route.length - 1) {
          at = [b.x + W, to[1]];
          d += ` L${at}`;
        }
      }
      const slot = route.length > 2 ? pos.get(route[Math.floor(route.length / 2)]) : null;
      mid = slot ? [slot.x + W / 2, slot.y + H / 2] : bezierMiddle(beziers[0]);
    } else {
      // Back or same-column edge: an arc under the boxes.
      const a = pos.get(l.parent);
      const b = pos.get(l.child);
      const p0 = [a.x + W / 2, a.y + H];
      const p3 = [b.x + W / 2, b.y + H];
      const drop = 40 + Math.abs(p3[0] - p0[0]) / 4;
      const bez = [p0, [p0[0], p0[1] + drop], [p3[0], p3[1] + drop], p3];
      d = `M${p0} C${bez[1]} ${bez[2]} ${p3}`;
      mid = bezierMiddle(bez);
    }
    const g = svg("g", { class: "edge", "data-parent": l.parent, "data-child": l.child, "data-calls": l.callCount });
    const title = svg("title");
    title.textContent = `${l.parent} → ${l.child}: ${l.callCount} calls`;
    const label = svg("text", { x: mid[0], y: mid[1] });
    label.textContent = String(l.callCount);
    const w = 8 + 7 * label.textContent.length;
    g.append(
      title,
      svg("path", {
        d,
        "stroke-width": 1 + 3 * (Math.log1p(l.callCount) / Math.log1p(maxCalls)),
        "marker-end": "url(#arrow)",
      }),
      svg("rect", { x: mid[0] - w / 2, y: mid[1] - 8, width: w, height: 16, rx: 3 }),
      label,
    );
    edges.append(g);
  });
  root.append(edges);
  for (const n of nodes) {
    const { x, y } = pos.get(n);
    const g = svg("g", { class: "node", "data-service": n, "data-column": layer.get(n), transform: `translate(${x},${y})` });
    g.append(svg("rect", { width: W, height: H, rx: 5, stroke: colour(n) }));
    const text = svg("text", { x: W / 2, y: H / 2 });
    text.textContent = n;
    g.append(text);
    root.append(g);
  }
  box.replaceChildren(root);
}

/** The point halfway along a cubic Bézier curve [p0, p1, p2, p3]. */
function bezierMiddle([p0, p1, p2, p3]) {
  return [0, 1].map((k) => (p0[k] + 3 * p1[k] + 3 * p2[k] + p3[k]) / 8);
}

// -- confidence and status ----------------------------------------------------------------------

function drawConfidence(doc) {
  $("#confidence-advice").textContent = doc.advice;
  const rows = [...doc.data].sort((a, b) => (a.confidence ?? 2) - (b.confidence ?? 2) || a.service.localeCompare(b.service));
  const body = el("tbody");
  for (const r of rows) {
    const known = r.confidence !== null && r.confidence !== undefined;
    body.append(
      el(
        "tr",
        { dataset: { service: r.service, confidence: known ? r.confidence : "" }, className: known && r.confidence < 0.99 ? "low" : null },
        el("td", {}, r.service),
        el("td", { className: "num" }, String(r.links)),
        el(
          "td",
          { className: "bar" },
          known ? `${(100 * r.confidence).toFixed(1)}%` : "—",
          known ? el("span", { className: "meter" }, el("span", { style: `width:${100 * r.confidence}%` })) : null,
        ),
      ),
    );
  }
  $("#confidence tbody").replaceWith(body);
}

/** Where the call graph comes from and, when the service learns it, each endpoint's support. */
function drawCallgraph(cg) {
  const body = el("tbody");
  if (cg.source === "file") {
    const stale = cg.calls_not_in_callgraph
      ? ` ${cg.calls_not_in_callgraph} calls since it took effect match no entry of it: it may be out of date.`
      : "";
    $("#callgraph-source").textContent =
      `Given by the operator: ${cg.count} endpoints.${stale} Reload the file with SIGHUP or POST /api/tacit/callgraph/reload.`;
  } else {
    const rows = Object.entries(cg.endpoints).sort(([a, x], [b, y]) => y.learned - x.learned || a.localeCompare(b));
    const when = cg.learned_ns ? `; last changed ${new Date(nsToMs(cg.learned_ns)).toLocaleString()}` : "";
    $("#callgraph-source").textContent =
      `Learned from the stored spans: ${cg.count} of ${rows.length} endpoints in use. An endpoint is used ` +
      `once ${cg.min_support} of its requests had their calls told apart or kept their context; until then its calls are ` +
      `left unmapped, with that reason${when}.`;
    for (const [name, e] of rows) {
      body.append(
        el(
          "tr",
          { dataset: { endpoint: name, learned: e.learned }, className: e.learned ? null : "low" },
          el("td", {}, name),
          el("td", { className: "num" }, String(e.seen)),
          el("td", { className: "num" }, String(e.alone)),
          el("td", { className: "num" }, String(e.given)),
          el("td", {}, e.learned ? "yes" : `no (${e.alone + e.given} of ${cg.min_support})`),
        ),
      );
    }
  }
  $("#callgraph tbody").replaceWith(body);
}

async function loadOverview() {
  const lookback = $("#lookback").value;
  const now = Date.now();
  const lookbackMs = lookback ? LOOKBACK_MS[lookback] * 3600 * 1000 : now;
  $("#dependencies-range").textContent = lookback ? `(${$("#lookback").selectedOptions[0].textContent})` : "(any time)";
  const jobs = [
    api(`/api/dependencies?endTs=${now}&lookback=${lookbackMs}`).then((d) => drawDependencies(d.data)),
    api("/api/tacit/confidence").then(drawConfidence),
    api("/api/tacit/status").then((s) => {
      $("#status").textContent =
        `${s.stored.traces} traces · ${s.stored.spans} spans stored · ${s.pending} pending · ` +
        `lag ${s.lag_seconds.toFixed(1)} s`;
      drawCallgraph(s.callgraph);
    }),
  ];
  const failed = (await Promise.allSettled(jobs)).filter((j) => j.status === "rejected");
  if (failed.length) $("#status").textContent = `could not load: ${failed[0].reason.message}`;
}

// -- latency charts -----------------------------------------------------------------------------

const LATENCY_REFRESH_MS = 5000;
const CHART = { width: 640, height: 250, left: 70, right: 16, top: 28, bottom: 34 };

/** Milliseconds since the epoch of a time the API gives in nanoseconds (a JSON number: a
 * double, exact to well under a millisecond at today's times). */
const nsToMs = (ns) => Math.round(ns / 1e6);

/** A latency given in nanoseconds. */
const fmtNs = (ns) => fmtDuration(ns / 1e3);

function fmtClock(ms) {
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** ``n + 1`` evenly spaced values from ``lo`` to ``hi``. */
const spaced = (lo, hi, n) => Array.from({ length: n + 1 }, (_, i) => lo + ((hi - lo) * i) / n);

/**
 * A time series chart in ``box``: per series, a line through its points (``t``: ms since the
 * epoch, ``v``: ns), each point a circle with the series' data attributes and, where ``lo`` and
 * ``hi`` are given, a bar between them; ``marks`` (``t``, attributes) sit on the time axis.
 * The svg carries its scales (data-t0/t1, data-v0/v1 and the pixels they map to, data-x0/x1,
 * data-y0/y1), so that what is drawn can be checked against the values.
 */
function drawChart(box, series, marks, empty) {
  const all = series.flatMap((s) => s.points);
  if (!all.length && !marks.length) {
    box.replaceChildren(el("p", { className: "hint" }, empty));
    return;
  }
  const times = [...all, ...marks].map((p) => p.t);
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, t0 + 1);
  const v0 = 0;
  const v1 = Math.max(...all.map((p) => p.hi ?? p.v), 1) * 1.1;
  const { width, height, left, right, top, bottom } = CHART;
  const [x0, x1, y0, y1] = [left, width - right, height - bottom, top];
  const x = (t) => x0 + ((t - t0) / (t1 - t0)) * (x1 - x0);
  const y = (v) => y0 - ((v - v0) / (v1 - v0)) * (y0 - y1);
  const root = svg("svg", {
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "data-t0": t0, "data-t1": t1, "data-v0": v0, "data-v1": v1,
    "data-x0": x0, "data-x1": x1, "data-y0": y0, "data-y1": y1,
  });
  const axis = svg("g", { class: "axis" });
  for (const v of spaced(v0, v1, 4)) {
    axis.append(svg("line", { x1: x0, x2: x1, y1: y(v), y2: y(v) }));
    const label = svg("text", { x: x0 - 6, y: y(v) + 3, "text-anchor": "end" });
    label.textContent = fmtNs(v);
    axis.append(label);
  }
  spaced(t0, t1, 4).forEach((t, i, all) => {
    const anchor = i === 0 ? "start" : i === all.length - 1 ? "end" : "middle";
    const label = svg("text", { x: x(t), y: y0 + 16, "text-anchor": anchor });
    label.textContent = fmtClock(t);
    axis.append(label);
  });
  root.append(axis);
  const legend = svg("g", { class: "legend" });
  series.forEach((s, i) => {
    const g = svg("g", { class: "series", "data-name": s.name });
    const stroke = PALETTE[i % PALETTE.length];
    g.append(svg("polyline", { stroke, points: s.points.map((p) => `${x(p.t)},${y(p.v)}`).join(" ") }));
    for (const p of s.points) {
      if (p.lo !== undefined && p.hi !== undefined) {
        g.append(svg("line", { class: "std", stroke, x1: x(p.t), x2: x(p.t), y1: y(p.lo), y2: y(p.hi) }));
      }
      const dot = svg("circle", { class: "point", cx: x(p.t), cy: y(p.v), r: 3.5, fill: stroke, ...p.attrs });
      const title = svg("title");
      title.textContent = p.title;
      dot.append(title);
      g.append(dot);
    }
    root.append(g);
    const text = svg("text", { x: x0 + 8 + i * 190, y: 14, fill: stroke });
    text.textContent = `● ${s.name}`;
    legend.append(text);
  });
  root.append(legend);
  for (const m of marks) {
    const mark = svg("rect", { class: "gap", x: x(m.t) - 3, y: y0 - 3, width: 6, height: 6, ...m.attrs });
    const title = svg("title");
    title.textContent = m.title;
    mark.append(title);
    root.append(mark);
  }
  box.replaceChildren(root);
}

function drawResponseLatency(doc) {
  const series = doc.series.map((s) => ({
    name: s.server,
    points: s.points.map((p) => ({
      t: nsToMs(p.epoch_start_ns),
      v: p.latency_ns,
      attrs: {
        "data-server": s.server,
        "data-epoch-ms": nsToMs(p.epoch_start_ns),
        "data-latency-ns": p.latency_ns,
        "data-samples": p.samples,
        "data-connections": p.connections,
      },
      title: `${s.server} at ${fmtClock(nsToMs(p.epoch_start_ns))}: ${fmtNs(p.latency_ns)} (${p.samples} gaps, ${p.connections} connections)`,
    })),
  }));
  drawChart($("#response-latency .chart"), series, [], "No estimates: give tacit serve --pirate-interface or --pirate-pcap.");
}

function drawOnewayLatency(doc) {
  const bySeries = new Map();
  const marks = [];
  for (const r of doc.data) {
    const attrs = { "data-source": r.source, "data-role": r.role, "data-interval": r.interval };
    const t = nsToMs(r.start_ns);
    if (r.mean_ns === null) {
      marks.push({ t, attrs: { ...attrs, "data-status": r.status }, title: `interval ${r.interval}: ${r.status}` });
      continue;
    }
    const name = `${r.source} (${r.role})`;
    if (!bySeries.has(name)) bySeries.set(name, { name, points: [] });
    const std = r.std_ns;
    bySeries.get(name).points.push({
      t,
      v: r.mean_ns,
      lo: std === null ? undefined : Math.max(0, r.mean_ns - std),
      hi: std === null ? undefined : r.mean_ns + std,
      attrs: { ...attrs, "data-mean-ns": r.mean_ns, "data-std-ns": std === null ? "" : std, "data-status": r.status },
      title: `interval ${r.interval} (${r.status}): ${fmtNs(r.mean_ns)}` + (std === null ? "" : ` ± ${fmtNs(std)}`),
    });
  }
  drawChart($("#oneway-latency .chart"), [...bySeries.values()], marks, "No intervals: give tacit serve --rda-results or POST agents' records to /api/tacit/latency/oneway.");
}

let latencyDraws = 0;

async function loadLatency() {
  const jobs = [
    api("/api/tacit/latency/response").then(drawResponseLatency),
    api("/api/tacit/latency/oneway").then(drawOnewayLatency),
  ];
  const settled = await Promise.allSettled(jobs);
  ["#response-latency", "#oneway-latency"].forEach((id, i) => {
    if (settled[i].status === "rejected") {
      $(`${id} .chart`).replaceChildren(el("p", { className: "error" }, `could not load: ${settled[i].reason.message}`));
    }
  });
  document.body.dataset.latencyDrawn = String(++latencyDraws);
}

// -- wiring -------------------------------------------------------------------------------------

function init() {
  const q = new URLSearchParams(location.search);
  if (q.get("lookback") !== null) $("#lookback").value = q.get("lookback");
  if (q.get("minDuration")) $("#min-duration").value = q.get("minDuration");
  if (q.get("minProbability")) $("#min-probability").value = String(Math.round(Number(q.get("minProbability")) * 100));
  if (q.get("limit")) $("#limit").value = q.get("limit");
  const service = q.get("service");
  // What is drawn waits for the services: their order gives each its colour.
  servicesReady = loadServices(service);
  servicesReady.then(() => {
    loadOperations($("#service").value, q.get("operation"));
    if (q.get("trace")) openTrace(q.get("trace"));
    loadOverview();
  });
  if (service) {
    const params = new URLSearchParams(q);
    params.delete("trace");
    search(params);
  }

  $("#service").addEventListener("change", () => loadOperations($("#service").value, null));
  $("#lookback").addEventListener("change", loadOverview);
  $("#refresh").addEventListener("click", () => {
    loadOverview();
    loadLatency();
  });
  loadLatency();
  setInterval(loadLatency, LATENCY_REFRESH_MS);
  $("#search").addEventListener("submit", (event) => {
    event.preventDefault();
    const params = formParams();
    const trace = new URLSearchParams(location.search).get("trace");
    if (trace) params.set("trace", trace);
    history.replaceState(null, "", `?${params}`);
    params.delete("trace");
    search(params);
  });
  const tbody = () => $("#trace-list tbody");
  $("#trace-list").addEventListener("click", (event) => {
    const th = event.target.closest("th[data-sort]");
    if (th) return sortBy(th.dataset.sort);
    const tr = event.target.closest("tr[data-trace-id]");
    if (tr && tbody().contains(tr)) openTrace(tr.dataset.traceId);
  });
  $("#trace-list").addEventListener("keydown", (event) => {
    const tr = event.target.closest("tr[data-trace-id]");
    if (tr && event.key === "Enter") openTrace(tr.dataset.traceId);
  });
  $("#waterfall").addEventListener("click", (event) => {
    const row = event.target.closest(".span-row");
    if (row) toggleSpan(row);
  });
  $("#waterfall").addEventListener("keydown", (event) => {
    const row = event.target.closest(".span-row");
    if (row && event.key === "Enter") toggleSpan(row);
  });
}

init();
