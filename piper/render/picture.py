"""A picture of a plan (``python -m piper show``, ``python -m piper solve --png``).

One PNG, four panels, every number from the one evaluator (:func:`piper.core.evaluate.evaluate`).
For an interleaved plan (docs/problem.md §9) a "stage" below is a device group (its v chunks):

* **devices by node**: the cluster's k devices in nodes of G (``Problem.node_size``), one
  block of cells per node, each device coloured by the stage it runs (grey: unused). The
  placement is the one docs/problem.md §2.3 documents (the evaluator assumes it and does
  not check it): stages in order of decreasing size d·t on devices 0, 1, ..., each stage
  contiguous. A stage with d·t <= G that this placement puts across a node boundary is
  listed in :attr:`PlanPicture.straddling` and named in the panel. The bottleneck stage's
  devices are outlined.
* **time per sample** of each stage, stacked: compute (P_i/d), edges (cut-edge
  communication) and resync (data-parallel weight resync), ``StageScore.compute``,
  ``.edge``, ``.resync``; the pipeline's TPS (the maximum) as a dashed line and the
  bottleneck stage (``Score.bottleneck``) marked. A strip of the stage colours links the
  bars to the device map.
* **memory per device** of each stage against the limit M (out-of-memory stages in red).
* **timeline** of one iteration (:mod:`piper.render.timeline`): per stage, replica 0's
  forward and backward passes of every micro-batch in the plan's schedule (1F1B or
  interleaved), idle time blank, the weight resync at the end; the schedule's end and the
  evaluator's batch time marked; with many micro-batches the steady state is cut out and the
  first and last micro-batches are shown.

The title gives TPS, batch time (``Score.batch_time``) and throughput (1/TPS), in the
workload's time units. Up to 16 stages every stage is labelled; beyond that every few
stages (and the bottleneck), so that 64 stages stay readable.

:func:`draw_plan` returns a :class:`PlanPicture`: what was drawn (stage count, device ->
stage assignment, node boundaries, the stage marked as the bottleneck), for tests and
callers that check the layout rather than the pixels.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from piper.core.errors import UsageError
from piper.core.evaluate import Score, evaluate
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.render.headless import headless_pyplot
from piper.render.timeline import draw_timeline, simulate_schedule

__all__ = ["PlanPicture", "place_stages", "draw_plan", "stage_colours", "default_time_unit"]

#: colours of the three parts of a stage's time
PART_COLOURS = {"compute": "#4C72B0", "edges": "#DD8452", "resync": "#55A868"}
UNUSED = (0.86, 0.86, 0.86, 1.0)
GAP = (1.0, 1.0, 1.0, 1.0)
#: at most this many devices on one line of a node's block
MAX_LINE = 64
#: the most devices a picture draws (one cell each): 2^17, above today's largest clusters; the
#: image grows with them (10^8 devices asked for 26.8 GiB)
MAX_PICTURE_DEVICES = 131_072
#: every stage is labelled up to this many stages; beyond, every ceil(L / LABELS) stages
LABELS = 16


@dataclass(frozen=True)
class PlanPicture:
    """What :func:`draw_plan` drew."""

    #: the PNG file written
    path: str
    #: number of stages drawn (bars in each panel)
    stages: int
    #: device index -> 0-based stage index, -1 for an unused device (length k)
    device_stage: tuple[int, ...]
    #: G, devices per node
    node_size: int
    #: the first device of every node after the first (G, 2G, ...; empty for one node)
    node_boundaries: tuple[int, ...]
    #: 0-based index of the stage marked as the bottleneck (None: no stages)
    bottleneck: int | None
    #: 0-based stages whose number is written on the x axes
    labelled_stages: tuple[int, ...]
    #: 0-based stages with d*t <= G that the placement puts across a node boundary
    straddling: tuple[int, ...]
    #: stages over the memory limit (0-based)
    oom_stages: tuple[int, ...]
    #: (rows, node blocks per row) of the device map's grid of nodes
    node_grid: tuple[int, int]
    #: (lines, devices per line) of one node's block of cells
    node_block: tuple[int, int]
    #: the timeline panel shows the schedule (False: too large to play out, or out of memory)
    timeline: bool = False
    #: the timeline's steady state was cut out (many micro-batches)
    timeline_cut: bool = False


def place_stages(plan: Plan, devices: int, node_size: int | None = None) -> tuple[int, ...]:
    """Device -> 0-based stage (-1 unused), the placement the evaluator assumes
    (docs/problem.md §2.3), made explicit:

    * stages larger than a node (d·t > G), in order of decreasing size (ties in pipeline
      order), on consecutive devices from device 0;
    * then the stages that fit in a node (d·t <= G), in order of decreasing size, each into
      the first node with that many free devices (first-fit decreasing), on consecutive
      devices of that node;
    * a stage that finds no such node takes the first free devices in device order, across
      node boundaries (the score assumed it inside a node: :attr:`PlanPicture.straddling`).

    When every d·t and G are powers of two this is the documented layout (every stage
    contiguous, in decreasing size from device 0) and no stage of size <= G straddles a
    node. ``node_size`` None: one node of ``devices``.
    """
    g = devices if node_size is None else min(node_size, devices)
    sizes = [s.devices for s in plan.group_stages()]
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    out = [-1] * devices
    start = 0
    for i in order:
        if sizes[i] > g:
            for dev in range(start, min(start + sizes[i], devices)):
                out[dev] = i
            start += sizes[i]
    # free devices of each node form one run at its end: first free device per node
    nodes = -(-devices // g)
    first_free = [min(max(start - n * g, 0), g) for n in range(nodes)]
    capacity = [min(g, devices - n * g) for n in range(nodes)]
    leftovers = []
    for i in order:
        if sizes[i] > g:
            continue
        for n in range(nodes):
            if capacity[n] - first_free[n] >= sizes[i]:
                base = n * g + first_free[n]
                for dev in range(base, base + sizes[i]):
                    out[dev] = i
                first_free[n] += sizes[i]
                break
        else:
            leftovers.append(i)
    free = (dev for dev in range(devices) if out[dev] == -1)
    for i in leftovers:
        for _ in range(sizes[i]):
            dev = next(free, None)
            if dev is None:
                break
            out[dev] = i
    return tuple(out)


def stage_colours(count: int) -> list[tuple[float, float, float, float]]:
    """RGBA per stage: qualitative colours up to 20 stages; beyond, a gradient in pipeline
    order with every other stage darker, so that neighbours stay apart."""
    from matplotlib import colormaps

    if count <= 10:
        cmap = colormaps["tab10"]
        return [tuple(cmap(i)) for i in range(count)]  # type: ignore[misc]
    if count <= 20:
        cmap = colormaps["tab20"]
        # pairs of tab20 are light/dark of one hue: take the dark ones first, then the light
        idx = [2 * i for i in range(10)] + [2 * i + 1 for i in range(10)]
        return [tuple(cmap(idx[i])) for i in range(count)]  # type: ignore[misc]
    cmap = colormaps["turbo"]
    out = []
    for i in range(count):
        r, g, b, a = cmap(0.05 + 0.9 * i / max(1, count - 1))
        k = 1.0 if i % 2 == 0 else 0.72
        out.append((r * k, g * k, b * k, a))
    return out


@dataclass(frozen=True)
class _MapGeometry:
    """Where each device's cell sits in the device map (image pixels)."""

    g: int  # devices per node
    line: int  # cells per line of a node's block
    lines: int  # lines per node's block
    per_row: int  # node blocks per grid row
    rows: int  # grid rows of node blocks
    cell: int  # pixels per cell side
    gap: int  # pixels between node blocks

    @property
    def block(self) -> tuple[int, int]:
        """(height, width) of one node's block, pixels."""
        return self.lines * self.cell, self.line * self.cell

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the whole image, pixels."""
        bh, bw = self.block
        return self.rows * (bh + self.gap) - self.gap, self.per_row * (bw + self.gap) - self.gap

    def origin(self, dev: int) -> tuple[int, int]:
        """(y, x) pixel of the top-left corner of a device's cell."""
        node, within = divmod(dev, self.g)
        nrow, ncol = divmod(node, self.per_row)
        r, c = divmod(within, self.line)
        bh, bw = self.block
        return nrow * (bh + self.gap) + r * self.cell, ncol * (bw + self.gap) + c * self.cell


def _map_geometry(devices: int, node_size: int, target_aspect: float, width_px: float) -> _MapGeometry:
    """Node blocks laid out in a grid whose width / height is close to ``target_aspect``.
    A node is one line of cells when there are few nodes (up to 16) and G <= 64; otherwise
    a block of about 1 x 2 cells (G = 8: 2 lines of 4), so that many nodes pack densely."""
    g = min(node_size, devices)
    nodes = -(-devices // g)
    if g <= MAX_LINE and nodes <= 16:
        lines = 1
    else:
        lines = max(d for d in range(1, g + 1) if g % d == 0 and d * d * 2 <= g) if g > 1 else 1
        lines = max(lines, -(-g // MAX_LINE))
    line = -(-g // lines)
    cell, gap = 6, 2
    best: tuple[float, int] | None = None
    for per_row in range(1, nodes + 1):
        rows = -(-nodes // per_row)
        width = per_row * (line * cell + gap) - gap
        height = rows * (lines * cell + gap) - gap
        score = abs(math.log(width / height / target_aspect))
        if best is None or score < best[0] - 1e-12:
            best = (score, per_row)
    per_row = best[1] if best else 1
    rows = -(-nodes // per_row)
    # about one image pixel per screen pixel (at most the axes' width), so that seams stay thin
    cell = int(max(4, min(40, width_px / (per_row * line * 1.15))))
    gap = max(2, cell // 3)
    if rows * (lines * cell + gap) > width_px / target_aspect * 1.05:  # too tall for the panel: shrink
        cell = int(max(3, (width_px / target_aspect / rows - gap) / lines))
    return _MapGeometry(g=g, line=line, lines=lines, per_row=per_row, rows=rows, cell=cell, gap=gap)


def _ticks(count: int, bottleneck: int | None) -> list[int]:
    if count <= LABELS:
        return list(range(count))
    step = -(-count // LABELS)
    ticks = set(range(0, count, step)) | {count - 1}
    if bottleneck is not None:
        ticks.add(bottleneck)
    # drop a regular tick that would collide with the bottleneck's or the last one's
    for special in (bottleneck, count - 1):
        if special is not None:
            ticks -= {t for t in ticks if t != special and abs(t - special) < step / 2 and t not in (0,)}
    return sorted(ticks)


def default_time_unit(problem: Problem) -> str:
    """"s" for a workload of the model front end (it writes seconds and a ``model`` record);
    otherwise "time units": a profile's unit is whatever its profiler wrote (docs/problem.md §1.4)."""
    return "s" if "model" in problem.extra else "time units"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _memory_unit(limit: float) -> tuple[float, str]:
    """(bytes per unit, unit name) for the memory axis: decimal units when the limit is a
    whole number of MB (80 GB), else binary when it is one of KiB (8 GiB), else decimal; the
    largest unit not above the limit."""
    if limit % 1e6 != 0 and limit % 1024 == 0:
        units = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
    else:
        units = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))
    for size, name in units:
        if limit >= size:
            return size, name
    return 1.0, "bytes"


def draw_plan(problem: Problem, plan: Plan, path: str | Path, *, score: Score | None = None,
              title: str | None = None, time_unit: str = "time units", dpi: int = 110) -> PlanPicture:
    """Draw ``plan`` on ``problem``'s cluster into the PNG file ``path`` (module docstring).

    ``score``: the evaluator's score of the plan (computed here when not given; it must be
    :func:`piper.core.evaluate.evaluate`'s). ``title``: first title line (e.g. the workload's
    name). ``time_unit``: the workload's time unit, for the labels. Raises
    :class:`piper.core.evaluate.PlanError` for an invalid plan and ``OSError`` when ``path``
    cannot be written.
    """
    plt = headless_pyplot()
    import numpy as np
    from matplotlib.patches import Patch

    if problem.devices > MAX_PICTURE_DEVICES:
        raise UsageError(f"the picture draws each device: {problem.devices:,} devices are more than "
                         f"{MAX_PICTURE_DEVICES:,}")
    if score is None:
        score = evaluate(problem, plan)
    stages = score.stages
    count = len(stages)
    k, g = problem.devices, problem.node_size
    g_eff = min(g, k)
    colours = stage_colours(count)
    device_stage = place_stages(plan, k, g)
    boundaries = tuple(range(g_eff, k, g_eff)) if g < k else ()
    bottleneck = score.bottleneck
    ticks = _ticks(count, bottleneck)
    oom = tuple(i for i, s in enumerate(stages) if s.oom)
    straddling = tuple(
        i for i, s in enumerate(plan.group_stages())
        if s.devices <= g and len({dev // g for dev, st in enumerate(device_stage) if st == i}) > 1
    )
    groups = plan.groups
    layers_of = [sum(len(plan.stages[j].nodes) for j in range(i, len(plan.stages), groups)) for i in range(count)]
    unit_word = "group" if plan.schedule.interleaved else "stage"
    timeline = simulate_schedule(problem, plan, score)

    fig = plt.figure(figsize=(12, 11.8), dpi=dpi)
    grid = fig.add_gridspec(5, 1, height_ratios=[2.3, 3.2, 0.22, 2.2, 2.6], hspace=0.12,
                            left=0.085, right=0.985, top=0.905, bottom=0.055)
    if count <= 12:  # a legend of the stages right of the map
        top_row = grid[0].subgridspec(1, 2, width_ratios=[2.5, 1.1], wspace=0.03)
        ax_map = fig.add_subplot(top_row[0])
        ax_legend = fig.add_subplot(top_row[1])
        ax_legend.axis("off")
    else:
        ax_map = fig.add_subplot(grid[0])
        ax_legend = None
    ax_time = fig.add_subplot(grid[1])
    ax_strip = fig.add_subplot(grid[2], sharex=ax_time)
    ax_mem = fig.add_subplot(grid[3], sharex=ax_time)
    ax_line = fig.add_subplot(grid[4])

    # ---- title ----------------------------------------------------------------------
    head = title or "plan"
    nodes_txt = f"{-(-k // g_eff)} nodes of {g_eff}" if g < k else f"one node of {k}"
    line1 = f"{head}: {count} stage{'s' if count != 1 else ''} on {score.devices_used} of {k} devices ({nodes_txt})"
    if plan.schedule.interleaved:
        line1 = (f"{head}: {count} device groups of {plan.schedule.virtual_stages} chunks (interleaved 1F1B) on "
                 f"{score.devices_used} of {k} devices ({nodes_txt})")
    unit, uname = _memory_unit(problem.memory_per_device)
    if score.oom:
        worst = stages[bottleneck] if bottleneck is not None else None
        line2 = "OUT OF MEMORY" + (f": stage {bottleneck + 1} needs {worst.memory / unit:.4g} {uname} per device > "
                                   f"M = {problem.memory_per_device / unit:.4g} {uname}" if worst else "")
        if len(oom) > 1:
            line2 += f" ({len(oom)} stages over the limit)"
    else:
        line2 = (f"TPS {score.tps:.5g} {time_unit} per sample  ·  batch time {score.batch_time:.5g} {time_unit}  ·  "
                 f"throughput {score.throughput:.5g} samples per {time_unit.rstrip('s') if time_unit.endswith('units') else time_unit}")
    fig.suptitle(line1 + "\n" + line2, fontsize=12.5, y=0.985)

    # ---- device map -------------------------------------------------------------------
    box = ax_map.get_position()
    fig_w, fig_h = fig.get_size_inches()
    geo = _map_geometry(k, g_eff, target_aspect=(box.width * fig_w) / (box.height * fig_h),
                        width_px=box.width * fig_w * dpi)
    height, width = geo.size
    image = np.ones((height, width, 4))
    image[:, :] = GAP
    mark = np.zeros((height, width))
    for dev, st in enumerate(device_stage):
        y, x0 = geo.origin(dev)
        image[y:y + geo.cell, x0:x0 + geo.cell] = colours[st] if st >= 0 else UNUSED
        if bottleneck is not None and st == bottleneck:
            mark[y:y + geo.cell, x0:x0 + geo.cell] = 1.0
    ax_map.imshow(image, interpolation="nearest", aspect="equal", extent=(-0.5, width - 0.5, height - 0.5, -0.5))
    ax_map.set_xlim(-2.5, width + 1.5)
    ax_map.set_ylim(height + 1.5, -2.5)
    scale = min(box.width * fig_w * dpi / (width + 4), box.height * fig_h * dpi / (height + 4))
    if geo.cell * scale >= 5:  # thin lines between the cells of a node, when cells are big enough to count
        from matplotlib.collections import LineCollection

        segments = []
        bh, bw = geo.block
        for node in range(-(-k // g_eff)):
            y0, x0 = geo.origin(node * g_eff)
            for c in range(1, geo.line):
                segments.append([(x0 + c * geo.cell - 0.5, y0 - 0.5), (x0 + c * geo.cell - 0.5, y0 + bh - 0.5)])
            for r in range(1, geo.lines):
                segments.append([(x0 - 0.5, y0 + r * geo.cell - 0.5), (x0 + bw - 0.5, y0 + r * geo.cell - 0.5)])
        ax_map.add_collection(LineCollection(segments, colors="white", linewidths=0.6, alpha=0.7))
    if bottleneck is not None and mark.any():
        padded = np.pad(mark, 2)  # a zero border, so that the outline closes at the image's edges too
        ax_map.contour(np.arange(width + 4) - 2, np.arange(height + 4) - 2, padded, levels=[0.5],
                       colors="black", linewidths=1.6 if k <= 512 else 1.1)
    # stage numbers on the map (the labelled stages), where the stage has most cells in one grid row
    from matplotlib import patheffects

    cells: dict[int, dict[int, list[tuple[int, int]]]] = {}
    for dev, st in enumerate(device_stage):
        if st in ticks:
            cells.setdefault(st, {}).setdefault(dev // g_eff, []).append(geo.origin(dev))
    for st, by_node in cells.items():
        _, where = max(by_node.items(), key=lambda kv: (len(kv[1]), -kv[0]))
        yc = sum(y for y, _ in where) / len(where) + geo.cell / 2 - 0.5
        xc = sum(x for _, x in where) / len(where) + geo.cell / 2 - 0.5
        ax_map.text(xc, yc, str(st + 1), ha="center", va="center",
                    fontsize=7.5, color="white", fontweight="bold",
                    path_effects=[patheffects.withStroke(linewidth=2, foreground="black")])
    ax_map.set_xticks([])
    nodes_total = -(-k // g_eff)
    row_ticks, row_labels = [], []
    bh = geo.block[0]
    for row in range(geo.rows):
        first, last = row * geo.per_row, min(nodes_total, (row + 1) * geo.per_row) - 1
        row_ticks.append(row * (bh + geo.gap) + bh / 2 - 0.5)
        row_labels.append(f"node {first}" if first == last else f"nodes {first}-{last}")
    step = max(1, -(-geo.rows // 10))
    ax_map.set_yticks(row_ticks[::step], row_labels[::step], fontsize=7.5)
    ax_map.tick_params(axis="y", length=0)
    for side in ax_map.spines.values():
        side.set_visible(False)
    if ax_legend is not None:
        handles = [
            Patch(facecolor=colours[i], edgecolor="black" if i == bottleneck else "none",
                  label=f"{unit_word} {i + 1}: d={s.d} t={s.t}, {s.d * s.t} dev, {_plural(layers_of[i], 'layer')}"
                  + (", bottleneck" if i == bottleneck else ""))
            for i, s in enumerate(stages)
        ]
        if score.devices_used < k:
            handles.append(Patch(facecolor=UNUSED, label=f"unused ({k - score.devices_used} dev)"))
        ax_legend.legend(handles=handles, loc="center left", fontsize=8.5 if count <= 8 else 8, frameon=False,
                         borderaxespad=0.0, handlelength=1.5)
    note = (f"devices by node ({nodes_txt}; one block per node, device 0 top left); colour = stage, "
            f"black outline = bottleneck stage {bottleneck + 1 if bottleneck is not None else '-'}")
    if count > 12:
        note += "; stage colours run from blue (stage 1) to red (last), see the strip below the time bars"
    if straddling:
        more = "" if len(straddling) <= 8 else f" and {len(straddling) - 8} more"
        note += (f"\nstage(s) {', '.join(str(i + 1) for i in straddling[:8])}{more} fit in a node (d t <= G) and are "
                 "scored as inside one, but first-fit could not place them inside one")
    wrapped = "\n".join(textwrap.fill(part, 170 if ax_legend is None else 125) for part in note.split("\n"))
    ax_map.set_title(wrapped, fontsize=8.5, loc="left")

    # ---- time per sample ----------------------------------------------------------------
    x = np.arange(count)
    comp = np.array([s.compute for s in stages])
    edge = np.array([s.edge for s in stages])
    resync = np.array([s.resync for s in stages])
    total = np.array([s.tps for s in stages])
    width_bar = 0.8
    ax_time.bar(x, comp, width_bar, color=PART_COLOURS["compute"], label="compute")
    ax_time.bar(x, edge, width_bar, bottom=comp, color=PART_COLOURS["edges"], label="edges (communication)")
    ax_time.bar(x, resync, width_bar, bottom=comp + edge, color=PART_COLOURS["resync"], label="resync (data-parallel)")
    top = float(total.max()) if count else 1.0
    if not score.oom:
        ax_time.axhline(score.tps, color="black", linestyle="--", linewidth=0.9, label=f"TPS {score.tps:.4g}")
    if bottleneck is not None:
        b = bottleneck
        ax_time.bar([b], [total[b]], width_bar, fill=False, edgecolor="red", linewidth=2.0)
        ax_time.annotate(f"bottleneck: {unit_word} {b + 1}" + (" (out of memory)" if stages[b].oom else ""),
                         xy=(b, total[b]), xytext=(b, top * 1.1), fontsize=9, color="red",
                         ha="left" if b < 0.15 * count - 0.5 else "right" if b > 0.85 * count - 0.5 else "center",
                         arrowprops=dict(arrowstyle="-|>", color="red", lw=1.2))
    ax_time.set_ylim(0, top * 1.38 if top > 0 else 1.0)  # the top band: the legend, clear of the bars
    ax_time.set_ylabel(f"time per sample\n({time_unit})", fontsize=9.5)
    ax_time.legend(loc="upper left", fontsize=8.5, ncol=4, frameon=False)
    ax_time.tick_params(labelbottom=False)
    ax_time.grid(axis="y", alpha=0.3)

    # ---- stage colour strip -------------------------------------------------------------
    ax_strip.imshow(np.array([colours]), aspect="auto", interpolation="nearest",
                    extent=(-0.5, count - 0.5, 0, 1))
    ax_strip.set_yticks([0.5], ["stage"], fontsize=8.5)
    ax_strip.tick_params(labelbottom=False, length=0)

    # ---- memory -----------------------------------------------------------------------
    mem = np.array([s.memory for s in stages]) / unit
    limit = problem.memory_per_device / unit
    ax_mem.bar(x, mem, width_bar, color=["#C44E52" if s.oom else "#8C8C8C" for s in stages])
    ax_mem.axhline(limit, color="#C44E52", linewidth=1.2, linestyle="-", label=f"limit M = {limit:.4g} {uname}")
    ax_mem.legend(loc="upper left", fontsize=8.5, frameon=False)
    ax_mem.set_ylim(0, max(limit, float(mem.max()) if count else 0.0) * 1.22)
    ax_mem.set_ylabel(f"memory per device\n({uname})", fontsize=9.5)
    ax_mem.grid(axis="y", alpha=0.3)
    if count <= LABELS:
        for i, s in enumerate(stages):
            ax_mem.text(i, mem[i], f"{mem[i]:.3g} ({100 * s.memory / problem.memory_per_device:.0f}%)",
                        ha="center", va="bottom", fontsize=7.5)
        labels = [f"{i + 1}\nd={stages[i].d} t={stages[i].t}" for i in ticks]
    else:
        labels = [str(i + 1) for i in ticks]
    ax_mem.set_xticks(ticks, labels, fontsize=8.5)
    for lab, i in zip(ax_mem.get_xticklabels(), ticks):
        if i == bottleneck:
            lab.set_color("red")
            lab.set_fontweight("bold")
    ax_mem.set_xlabel(f"{unit_word} (pipeline order)" + ("" if count <= LABELS else f"; labels every {-(-count // LABELS)} {unit_word}s"),
                      fontsize=9.5)
    ax_mem.set_xlim(-0.5, count - 0.5)

    # ---- timeline -----------------------------------------------------------------------
    cut = None
    if timeline is not None:
        cut = draw_timeline(ax_line, timeline, colours, batch_time=score.batch_time, time_unit=time_unit)
        ax_line.set_ylabel(f"{unit_word}\n(one iteration)", fontsize=9.5)
    else:
        ax_line.axis("off")
        why = "out of memory" if score.oom else "too many passes to play out"
        ax_line.text(0.5, 0.5, f"no timeline: {why}", ha="center", va="center", fontsize=9, transform=ax_line.transAxes)

    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return PlanPicture(
        path=str(path),
        stages=count,
        device_stage=device_stage,
        node_size=g_eff,
        node_boundaries=boundaries,
        bottleneck=bottleneck,
        labelled_stages=tuple(ticks),
        straddling=straddling,
        oom_stages=oom,
        node_grid=(geo.rows, geo.per_row),
        node_block=(geo.lines, geo.line),
        timeline=timeline is not None,
        timeline_cut=cut is not None,
    )
