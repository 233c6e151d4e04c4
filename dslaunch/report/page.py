"""``timeline.html``: one self-contained page (inline CSS, SVG and JS; no URL at all), one bar per rank coloured by
phase, a hover box with the exact times, readable from 1 to 1,024 ranks (rows shrink to 2 px, then the chart
scrolls)."""

from __future__ import annotations

import html
import json
import math
import time

from dslaunch.logs.phases import PHASES
from dslaunch.report import table
from dslaunch.report.timeline import Timeline

PLOT_W = 1000  # px of the time axis
LABEL_W = 84  # px for the rank labels
COLOURS = ("#9d9d9d", "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#b07aa1")  # one per phase


def _row_height(n: int) -> float:
    return min(22.0, max(2.0, 720.0 / max(n, 1)))


def _tick_step(span: float) -> float:
    raw = span / 8
    base = 10.0 ** math.floor(math.log10(raw))
    step: float = next(m * base for m in (1, 2, 5, 10) if m * base >= raw)
    return step


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d} UTC"


def _svg(timeline: Timeline) -> str:
    """The time axis (always in view) above the scrolling chart: one ``g.bar`` per rank."""
    n = len(timeline.ranks)
    row = _row_height(n)
    bar = row * 0.75 if row >= 6 else row
    span = max(timeline.end - timeline.start, 1e-6)
    scale = PLOT_W / span
    height = math.ceil(n * row + 4)
    width = LABEL_W + PLOT_W + 16
    every = max(1, math.ceil(12 / row))  # a label every `every` ranks, so labels never overlap
    step = _tick_step(span)
    xs = [(LABEL_W + i * step * scale, i * step) for i in range(int(span / step) + 1)]
    axis = "".join(f'<text x="{x:.1f}" y="14">{s:g}s</text>' for x, s in xs)
    grid = "".join(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height}"/>' for x, _ in xs)
    out = [
        f'<svg class="axis" width="{width}" height="20"><text class="label" x="{LABEL_W - 16}" y="14">rank</text>'
        f"{axis}</svg><div class=chart>",
        f'<svg id="timeline" width="{width}" height="{height}" role="img" aria-label="launch timeline, one bar per '
        f'rank"><g class="axis">{grid}</g>',
    ]
    for i, r in enumerate(timeline.ranks):
        failed = " failed" if r.code else ""
        out.append(f'<g class="bar{failed}" data-rank="{r.rank}" data-i="{i}" transform="translate(0,{i * row:.1f})">')
        if i % every == 0:
            out.append(f'<text class="label" x="{LABEL_W - 6}" y="{min(row, 12) * 0.85:.1f}">{r.rank}</text>')
        out.append(f'<rect class="hit" x="0" width="{width}" height="{row:.1f}"/>')  # hover anywhere on the row
        before: float | None = None
        for phase, t in r.times.items():
            if before is not None:
                x, w = LABEL_W + (before - timeline.start) * scale, max((t - before) * scale, 0.5)
                out.append(f'<rect class="p{PHASES.index(phase)}" x="{x:.1f}" width="{w:.1f}" height="{bar:.1f}"/>')
            before = t
        out.append("</g>")
    out.append("</svg></div>")
    return "".join(out)


def _data(timeline: Timeline) -> str:
    data = {
        "start": timeline.start,
        "start_iso": _iso(timeline.start),
        "phases": list(PHASES),
        "labels": [table.SEGMENT[p] for p in PHASES],
        "ranks": [
            [r.rank, r.host, [round(r.times[p] - timeline.start, 6) if p in r.times else None for p in PHASES], r.code]
            for r in timeline.ranks
        ],
    }
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _table(timeline: Timeline) -> str:
    cells = "".join(
        f"<tr><td><span class=sw style='background:{COLOURS[PHASES.index(r.phase)]}'></span>{r.phase}</td>"
        f"<td>{r.ranks}/{len(timeline.ranks)}</td><td>{r.at_median:.3f}s</td><td>{r.at_max:.3f}s</td>"
        f"<td>{r.slowest_rank}</td><td>{html.escape(r.slowest_host)}</td>"
        f"<td>{'-' if r.took_median is None else f'{r.took_median:.3f}s'}</td>"
        f"<td>{'-' if r.took_max is None else f'{r.took_max:.3f}s'}</td></tr>"
        for r in table.rows(timeline)
    )
    return (
        "<table class=phases><thead><tr><th>phase</th><th>ranks</th><th>median</th><th>slowest</th><th>rank</th>"
        f"<th>host</th><th>took median</th><th>took max</th></tr></thead><tbody>{cells}</tbody></table>"
    )


def _legend() -> str:
    return "".join(
        f"<span class=item><span class=sw style='background:{COLOURS[i]}'></span>{html.escape(table.SEGMENT[p])} "
        f"<small>(to {p})</small></span>"
        for i, p in enumerate(PHASES)
        if i
    )


_CSS = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 4px}"
    ".phases{border-collapse:collapse;margin:8px 0}.phases td,.phases th{padding:2px 10px;text-align:right}"
    ".phases td:first-child,.phases th:first-child,.phases td:nth-child(6),.phases th:nth-child(6){text-align:left}"
    ".phases tbody tr:nth-child(odd){background:#f4f4f4}.sw{display:inline-block;width:10px;height:10px;"
    "margin-right:5px;border-radius:2px}.legend .item{margin-right:14px;white-space:nowrap}"
    ".chart{max-height:80vh;overflow:auto;border:1px solid #ddd}svg.axis{display:block;margin-top:8px}"
    ".axis line{stroke:#e3e3e3}.axis text{font-size:11px;fill:#666;text-anchor:middle}"
    ".label,.axis .label{font-size:11px;fill:#444;text-anchor:end}.failed .label{fill:#c00;font-weight:bold}"
    ".hit{fill:transparent}.bar:hover .hit{fill:#0000000d}"
    + "".join(f".p{i}{{fill:{c}}}" for i, c in enumerate(COLOURS))
    + "#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #999;padding:6px 8px;"
    "font:12px/1.35 ui-monospace,monospace;box-shadow:0 2px 6px #0003;white-space:pre}"
)

_JS = """
(function () {
  var data = JSON.parse(document.getElementById("timeline-data").textContent);
  var tip = document.getElementById("tip");
  function fmt(s) { return (s >= 0 ? "+" : "") + s.toFixed(6) + "s"; }
  function text(i, phaseIndex) {
    var r = data.ranks[i], times = r[2], lines = ["rank " + r[0] + " on " + r[1] +
      (r[3] === null ? "" : "  exit code " + r[3])], before = null;
    for (var p = 0; p < data.phases.length; p++) {
      if (times[p] === null) { lines.push("  " + data.phases[p].padEnd(15) + "-"); continue; }
      var took = before === null ? "" : "  took " + (times[p] - before).toFixed(6) + "s";
      var mark = p === phaseIndex ? "> " : "  ";
      var abs = new Date((data.start + times[p]) * 1000).toISOString();
      lines.push(mark + data.phases[p].padEnd(15) + fmt(times[p]) + "  " + abs + took);
      before = times[p];
    }
    return lines.join("\\n");
  }
  var svg = document.getElementById("timeline");
  svg.addEventListener("mousemove", function (ev) {
    var g = ev.target.closest("g.bar");
    if (!g) { tip.hidden = true; return; }
    var cls = ev.target.getAttribute("class") || "";
    var phaseIndex = /^p[0-9]$/.test(cls) ? Number(cls.slice(1)) : -1;
    tip.textContent = text(Number(g.dataset.i), phaseIndex);
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > innerWidth) { x = ev.clientX - tip.offsetWidth - 14; }
    if (y + tip.offsetHeight > innerHeight) { y = ev.clientY - tip.offsetHeight - 14; }
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = Math.max(0, y) + "px";
  });
  svg.addEventListener("mouseleave", function () { tip.hidden = true; });
  document.body.dataset.bars = String(svg.querySelectorAll("g.bar").length);
  document.body.dataset.ready = "1";
})();
"""


def render(timeline: Timeline, log_dir: str = "") -> str:
    """The whole page for ``timeline``; nothing in it refers to anything outside it."""
    title = f"dslaunch launch timeline, run {timeline.run_id or '?'}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p class=head>{html.escape(table.headline(timeline))}<br>"
        f"started {html.escape(_iso(timeline.start))}{' - log dir ' + html.escape(log_dir) if log_dir else ''}<br>"
        f"{html.escape(table.exit_line(timeline))}</p>"
        f"{_table(timeline)}<div class=legend>{_legend()}</div>"
        f"{_svg(timeline)}<div id=tip hidden></div>"
        f'<script type="application/json" id="timeline-data">{_data(timeline)}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )
