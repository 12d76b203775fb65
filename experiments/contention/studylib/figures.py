"""Figures: the PNGs of the report (matplotlib; the caller passes pyplot in)."""

import math
import os
from collections import defaultdict

from .analysis import adders_of, adders_points, best_by, noise_rows, same_bits, sm_matrix
from .load import shape_label, shape_order, tile_of


# The strategy colours and the (engine) line styles of every figure.
STRATEGY_COLOR = {"atomic": "tab:red", "partials": "tab:blue", "owning": "tab:green", "ordered": "tab:purple"}
ENGINE_STYLE = {"mma": "-", "wgmma": "--", "cublaslt": ":", "fma": "-."}


def draw_time(top, bot, rows, xkey, group_key=lambda r: ()):
    """Fastest variant of each (engine, strategy[, group]) against xkey; below, / the fastest at that x."""
    best = best_by(rows, lambda r: (r["engine"], r["strategy"]) + group_key(r) + (r[xkey],))
    fastest = best_by(rows, lambda r: group_key(r) + (r[xkey],))
    for series in sorted({k[:-1] for k in best}):
        eng, strat, grp = series[0], series[1], series[2:]
        xs = sorted(k[-1] for k in best if k[:-1] == series)
        causal = grp == (True,)
        style = dict(marker="^" if causal else "o", color=STRATEGY_COLOR.get(strat, "gray"),
                     linestyle=ENGINE_STYLE.get(eng, "-"), alpha=0.6 if causal else 1.0,
                     label="%s %s%s" % (eng, strat, " causal" if causal else ""))
        top.plot(xs, [best[series + (x,)]["median_ms"] for x in xs], **style)
        bot.plot(xs, [best[series + (x,)]["median_ms"] / fastest[grp + (x,)]["median_ms"] for x in xs], **style)
    top.set_yscale("log")
    for ax in (top, bot):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)


def fig_time_vs_N(plt, points, att, path):
    """Top row: median time of the fastest variant of each (engine, strategy) against the contention
    level, one column per kernel family (attention: the Sq = Sk sweep, and the GQA sweep).
    Bottom row: the same divided by the fastest of all at that point (1 = fastest)."""
    cols = []
    if points or not att:
        cols.append("flce")
    if att and (att["sweep"] or att["causal"]):
        cols.append("attention")
    if att and len({r["group"] for r in att["gqa"]}) > 1:
        cols.append("gqa")
    cols = cols or ["flce"]  # nothing on any axis: one empty panel
    fig, axs = plt.subplots(2, len(cols), figsize=(7 * len(cols), 8), squeeze=False, sharex="col")
    for col, what in enumerate(cols):
        top, bot = axs[0][col], axs[1][col]
        if what == "flce":
            draw_time(top, bot, points, "N")
            top.set_ylabel("median time (ms), fastest variant of the group")
            bot.set_ylabel("time / fastest at this N")
            bot.set_xlabel("N (rows) at fixed D, V: more chunks, each with the variant's sk adders (time_vs_adders.png)")
            if points:
                top.set_title("FLCE: D=%d, V=%d" % (points[0]["D"], points[0]["V"]))
                top.legend(fontsize=8)
            else:
                top.set_title("flce: no kernels measured yet")
        elif what == "attention":
            a = att["axes"]
            draw_time(top, bot, att["sweep"] + att["causal"], "Sk", lambda r: (r["causal"],))
            top.set_ylabel("median time (ms), fastest variant of the group")
            bot.set_ylabel("time / fastest at this Sk (causal: among causal)")
            bot.set_xlabel("Sq = Sk (Sk / bc key blocks add into each dQ tile; B*S about %s)" % a.get("tokens"))
            top.set_title("ATTENTION: H=%s, d=%s, forward+backward (triangles: causal)" % (a.get("H"), a.get("d")))
            top.legend(fontsize=8)
        else:
            a = att["axes"]
            draw_time(top, bot, att["gqa"], "group")
            top.set_ylabel("median time (ms), fastest variant of the group")
            bot.set_ylabel("time / fastest at this group size")
            bot.set_xlabel("GQA group size H / Hkv (query heads summed into each dK, dV)")
            top.set_title("ATTENTION GQA: H=%s, Sq = Sk = %s, d=%s" % (a.get("H"), a.get("S_gqa"), a.get("d")))
            top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_cost(plt, panels, path):
    """One bar panel per family: best deterministic / best overall per problem."""
    panels = [(t, [c for c in cost if c[2] is not None]) for t, cost in panels]
    widths = [max(6, 0.6 * len(rows) + 2) for _, rows in panels]
    fig, axs = plt.subplots(1, len(panels), figsize=(sum(widths), 4.5), squeeze=False,
                            gridspec_kw={"width_ratios": widths})
    for ax, (fam, rows) in zip(axs[0], panels):
        ax.bar(range(len(rows)), [c[2] for c in rows], color="tab:gray")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([shape_label(c[0]) for c in rows], rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("best deterministic / best overall (time)")
        if fam == "attention":
            ax.set_xlabel("problem B,H,Hkv,Sq,Sk,d")
            ax.set_title("Cost of determinism: attention")
        else:
            ax.set_xlabel("problem N,D,V")
            ax.set_title("Cost of determinism" if len(panels) == 1 else "Cost of determinism: FLCE")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory_panel(ax, lines, marker, label, xlabel, title, engine=lambda k: k[0], color=None, min_points=1,
                 xlog=False, ylog=False, ncol=1):
    """One memory panel: a line per key of `lines` ({key: [(x, MiB)]}, sorted), labelled label(key), its
    line style from engine(key)'s, its colour color(key) when given."""
    for key, xy in sorted(lines.items()):
        if len(xy) < min_points:
            continue
        xy.sort()
        style = dict(marker=marker, linestyle=ENGINE_STYLE.get(engine(key), "-"))
        if color:
            style["color"] = color(key)
        ax.plot([x for x, _ in xy], [y for _, y in xy], label=label(key), **style)
    if xlog:
        ax.set_xscale("log", base=2)
    if ylog:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("peak extra device memory (MiB)")
    ax.set_title(title)
    ax.grid(True, which="both" if ylog else "major", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6, **({"ncol": ncol} if ncol > 1 else {}))


def draw_memory_flce(axs, points):
    mib = 1 << 20
    # Owning: peak extra memory against the chunk budget, one line per (engine, tile, N).
    lines = defaultdict(list)
    for r in points:
        if r["strategy"] == "owning" and "mb" in r["knobs"]:
            lines[(r["engine"], tile_of(r), r["N"])].append((r["knobs"]["mb"], r["peak_extra_bytes"] / mib))
    memory_panel(axs[0], lines, "o", lambda k: "%s %s N=%d" % k, "owning chunk budget mb (MiB)",
                 "owning: memory vs chunk budget", min_points=2, ncol=2)
    # Partials: peak extra memory against N, one line per knob setting (mb, sk, vs).
    lines = defaultdict(list)
    for r in points:
        if r["strategy"] == "partials":
            k = r["knobs"]
            lines[(r["engine"], tile_of(r), k.get("mb", 0), k.get("sk", 0), k.get("vs", 0))].append(
                (r["N"], r["peak_extra_bytes"] / mib))
    memory_panel(axs[1], lines, "s", lambda k: "%s %s mb=%d sk=%d vs=%d" % k, "N",
                 "partials: memory (workspace bound mb, sk, vs) vs N", xlog=True)


def draw_memory_attention(axs, sweep):
    mib = 1 << 20
    # Every strategy: peak extra memory against Sk (owning: the D vector only;
    # atomic: + the fp32 dQ accumulator; partials: + the slab, bounded by mb).
    lines = defaultdict(list)
    for r in sweep:
        lines[(r["strategy"], r["engine"], r["variant"].split(".", 4)[-1])].append(
            (r["Sk"], r["peak_extra_bytes"] / mib))
    memory_panel(axs[0], lines, "o", lambda k: "%s %s %s" % (k[1], k[0], k[2]), "Sq = Sk (B*S about constant)",
                 "attention: memory vs Sk (owning, atomic, partials mb, ...)",
                 engine=lambda k: k[1], color=lambda k: STRATEGY_COLOR.get(k[0], "gray"), xlog=True, ylog=True)
    # Partials: peak extra memory and time against the workspace bound mb, one point per (variant, Sk).
    lines = defaultdict(list)
    for r in sweep:
        if r["strategy"] == "partials" and "mb" in r["knobs"]:
            lines[(r["engine"], tile_of(r), r["Sk"])].append((r["knobs"]["mb"], r["peak_extra_bytes"] / mib))
    memory_panel(axs[1], lines, "s", lambda k: "%s %s Sk=%d" % k, "partials workspace bound mb (MiB)",
                 "attention partials: memory vs workspace bound mb", ncol=2)


def fig_memory(plt, points, att, path):
    rows = []
    if points or not att:
        rows.append("flce")
    if att and att["sweep"]:
        rows.append("attention")
    rows = rows or ["flce"]
    fig, axs = plt.subplots(len(rows), 2, figsize=(13, 4.8 * len(rows)), squeeze=False)
    for i, what in enumerate(rows):
        if what == "flce":
            draw_memory_flce(axs[i], points)
        else:
            draw_memory_attention(axs[i], att["sweep"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_noise(ax, rows, output, xlabel, title):
    by_var = defaultdict(list)
    for n, r, rel, mx, err in rows:
        by_var[r["variant"] + (" causal" if r.get("causal") else "")].append((n, rel, mx, err, r))
    # A spread of 0 (bitwise-identical repeats) cannot sit on a log axis: it is
    # drawn at a floor two decades below the smallest positive value shown,
    # with hollow markers, and the legend says so.
    positive = [v for _, _, rel, mx, err in rows for v in (rel, mx, err) if v is not None and v > 0]
    floor = (min(positive) if positive else 1e-6) / 100.0
    zero_drawn = False

    def at_floor(v):
        nonlocal zero_drawn
        if v == 0:
            zero_drawn = True
            return floor
        return v

    for name, pts in sorted(by_var.items()):
        pts.sort(key=lambda p: p[0])
        r = pts[0][4]
        col = STRATEGY_COLOR.get(r["strategy"], "gray")
        causal = " causal" if r.get("causal") else ""
        if r["strategy"] == "atomic":
            for idx, marker, style, what in (
                    (1, "o", "-", "run-to-run spread ||%s_r - %s_0|| / ||%s_0||" % (output, output, output)),
                    (2, "^", ":", "max |%s_r - %s_0| / ||%s_0||" % (output, output, output))):
                xs = [p[0] for p in pts]
                ys = [at_floor(p[idx]) for p in pts]
                face = ["none" if p[idx] == 0 else col for p in pts]
                ax.plot(xs, ys, color=col, linestyle=style, alpha=0.6 if causal else 1.0,
                        label=what + ": " + r["engine"] + " " + tile_of(r) + causal)
                ax.scatter(xs, ys, marker=marker, edgecolors=col, facecolors=face, zorder=3)
        errs = [(p[0], p[3]) for p in pts if p[3] is not None]
        if errs and r["strategy"] in ("atomic", "owning"):
            ax.plot([e[0] for e in errs], [e[1] for e in errs], marker="x", color=col, linestyle="--", alpha=0.5,
                    label="error vs float64 (%s %s%s)" % (r["engine"], r["strategy"], causal))
    if zero_drawn:
        ax.axhline(floor, color="gray", linewidth=0.8, linestyle="-.",
                   label="spread = 0 (bitwise-identical repeats), drawn at this floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("relative to ||%s|| (%s output)" % (output, output))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, l in zip(handles, labels):
        if l and not l.startswith("_") and l not in seen:
            seen[l] = h
    if seen:
        ax.legend(seen.values(), seen.keys(), fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def fig_noise(plt, points, att, path):
    panels = []
    if points or not att:
        panels.append(("N (rows) at fixed D, V; adders per dW element in a chunk: the variant's sk (noise_vs_adders.png)",
                       noise_rows(points), "dW", "Atomic noise vs N, beside the error against float64"))
    if att and (att["sweep"] or att["causal"]):
        panels.append(("Sq = Sk (Sk / bc key blocks add into each dQ tile)",
                       noise_rows(att["sweep"] + att["causal"], "dQ", "Sk"), "dQ",
                       "Attention: atomic dQ noise vs Sk, beside the error against float64"))
    panels = panels or [("N", [], "dW", "Atomic noise: nothing measured on the contention axes")]
    fig, axs = plt.subplots(len(panels), 1, figsize=(9, 5 * len(panels)), squeeze=False)
    for ax, (xlabel, rows, output, title) in zip(axs[:, 0], panels):
        draw_noise(ax, rows, output, xlabel, title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_invariance(ax, classes, title):
    pids = sorted(classes, key=lambda p: shape_order(classes[p][0]))
    variants = sorted({v for p in pids for g in classes[p][1] for v in g})
    grid = [[float("nan")] * len(pids) for _ in variants]
    for j, p in enumerate(pids):
        for ci, g in enumerate(classes[p][1]):
            for v in g:
                grid[variants.index(v)][j] = ci
    if variants:
        ax.imshow(grid, aspect="auto", cmap="tab20", interpolation="nearest", vmin=0, vmax=19)
        for i in range(len(variants)):
            for j in range(len(pids)):
                if not math.isnan(grid[i][j]):
                    ax.text(j, i, "%d" % grid[i][j], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(variants)))
    ax.set_yticklabels(variants, fontsize=6)
    ax.set_xticks(range(len(pids)))
    ax.set_xticklabels([shape_label(classes[p][0]) for p in pids], rotation=60, ha="right", fontsize=7)
    ax.set_title(title)
    return len(pids), len(variants)


def fig_invariance(plt, panels, path):
    """One panel per family: the deterministic variants' classes of identical bits per shape."""
    sizes = []
    for _, classes in panels:
        pids = len(classes)
        nvar = len({v for p in classes for g in classes[p][1] for v in g})
        sizes.append((pids, nvar))
    width = max(max(6, 0.7 * p + 5) for p, _ in sizes)
    heights = [max(3, 0.28 * v + 1.5) for _, v in sizes]
    fig, axs = plt.subplots(len(panels), 1, figsize=(width, sum(heights)), squeeze=False,
                            gridspec_kw={"height_ratios": heights})
    base = "Config-invariance classes (same number in a column: identical bits of every output)"
    for ax, (fam, classes) in zip(axs[:, 0], panels):
        draw_invariance(ax, classes, base if len(panels) == 1 else "%s: %s" % (
            "FLCE" if fam == "flce" else "attention", base))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


OUTPUT = {"flce": "dW", "attention": "dQ"}
ADDERS_LABEL = {"flce": "concurrent adders per dW element in a chunk (atomic, partials: row splits sk; sk0 = every row block)",
                "attention": "key blocks adding into each dQ tile (Sk / bc)"}


def family_panels(plt, views, path, draw, height=4.5):
    """One panel per family present (one empty panel when none), drawn by draw(ax, family, view)."""
    fams = list(views) or ["flce"]
    fig, axs = plt.subplots(len(fams), 1, figsize=(10, height * len(fams)), squeeze=False)
    for ax, fam in zip(axs[:, 0], fams):
        draw(ax, fam, views.get(fam))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_time_vs_adders(ax, fam, view):
    label, rows = adders_points(view) if view else (None, [])
    series = defaultdict(list)
    for r in rows:
        a = adders_of(r)
        if a is not None:
            series[(r["engine"], r["strategy"], tile_of(r))].append((a, r["median_ms"]))
    for (eng, strat, tile), xy in sorted(series.items()):
        best = {}
        for a, ms in xy:
            best[a] = min(ms, best.get(a, ms))
        xs = sorted(best)
        ax.plot(xs, [best[x] for x in xs], marker="o", color=STRATEGY_COLOR.get(strat, "gray"),
                linestyle=ENGINE_STYLE.get(eng, "-"), label="%s %s %s" % (eng, strat, tile))
    own = [r for r in rows if r["strategy"] in ("owning", "ordered")]
    if own and fam == "flce":
        o = min(own, key=lambda r: r["median_ms"])
        ax.axhline(o["median_ms"], color=STRATEGY_COLOR["owning"], linestyle="--", linewidth=0.8,
                   label="fastest owning (no adders): %s" % o["variant"].split(".", 2)[-1])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(ADDERS_LABEL[fam])
    ax.set_ylabel("median time (ms)")
    ax.set_title("%s: time against adders%s" % (fam.upper(), " at " + label if label else ": nothing measured"))
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)


def draw_noise_vs_adders(ax, fam, view):
    label, rows = adders_points(view) if view else (None, [])
    out = OUTPUT[fam]
    pts = []
    for r in rows:
        a, sp = adders_of(r), r["spread"].get(out)
        if r["strategy"] == "atomic" and a is not None and sp and sp["norm"]:
            pts.append((a, sp["diff_norm"] / sp["norm"], r))
    positive = [v for _, v, _ in pts if v and v > 0]
    floor = (min(positive) if positive else 1e-6) / 100.0
    series = defaultdict(list)
    for a, v, r in pts:
        series[(r["engine"], tile_of(r))].append((a, v, r))
    for (eng, tile), xy in sorted(series.items()):
        xy.sort(key=lambda t: t[0])
        xs = [a for a, _, _ in xy]
        ys = [v if v else floor for _, v, _ in xy]
        ax.plot(xs, ys, color=STRATEGY_COLOR["atomic"], linestyle=ENGINE_STYLE.get(eng, "-"),
                label="atomic %s %s: ||%s_r - %s_0|| / ||%s_0||" % (eng, tile, out, out, out))
        ax.scatter(xs, ys, edgecolors=STRATEGY_COLOR["atomic"],
                   facecolors=["none" if not v else STRATEGY_COLOR["atomic"] for _, v, _ in xy], zorder=3)
        for a, v, r in xy:
            ax.annotate("%s/%s" % (r["distinct"].get(out, "?"), r["repeats"]), (a, v if v else floor),
                        fontsize=6, textcoords="offset points", xytext=(3, 3))
    if any(not v for _, v, _ in pts):
        ax.axhline(floor, color="gray", linewidth=0.8, linestyle="-.",
                   label="spread = 0 (bitwise-identical repeats), drawn at this floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(ADDERS_LABEL[fam])
    ax.set_ylabel("run-to-run spread relative to ||%s|| (labels: distinct digests / repeats)" % out)
    ax.set_title("%s: atomic noise against adders%s" % (fam.upper(), " at " + label if label else ""))
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)


def draw_bits_vs_sms(ax, fam, view):
    cells, full, levels = sm_matrix(view, OUTPUT[fam]) if view else ({}, None, [])
    keys = sorted(cells, key=lambda k: (cells[k][full]["strategy"], k[1], k[0]))
    grid = [[float("nan")] * len(levels) for _ in keys]
    for i, k in enumerate(keys):
        ref = cells[k][full]
        for j, s in enumerate(levels):
            r = cells[k].get(s)
            if r is not None:
                grid[i][j] = 1.0 if same_bits(r, ref, OUTPUT[fam]) else 0.0
    if keys:
        ax.imshow(grid, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1, interpolation="nearest")
        for i, k in enumerate(keys):
            for j, s in enumerate(levels):
                r = cells[k].get(s)
                if r is not None:
                    ax.text(j, i, ("=" if grid[i][j] == 1.0 else "x") +
                            (" r2r" if r["distinct"].get(OUTPUT[fam], 1) > 1 else ""), ha="center", va="center",
                            fontsize=6)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(["%s @%s" % (k[1], shape_label(cells[k][full])) for k in keys], fontsize=5)
    ax.set_xticks(range(len(levels)))
    ax.set_xticklabels(["%d SMs" % s for s in levels], fontsize=7)
    ax.set_xlabel("SMs the measurement ran on (green-context slices; the last is the whole GPU)")
    ax.set_title("%s: repeat-0 %s bits against the whole GPU's (=: identical, x: differ; r2r: repeats differ)%s" % (
        fam.upper(), OUTPUT[fam], "" if keys else " - no SM-count axis in this store"), fontsize=8)


FIGURES = {"time": "time_vs_N.png", "cost": "cost_of_determinism.png", "memory": "memory.png",
           "noise": "atomic_noise.png", "invariance": "invariance_classes.png",
           "adders_time": "time_vs_adders.png", "adders_noise": "noise_vs_adders.png", "sms": "bits_vs_sms.png"}


def draw_all(plt, views, out):
    """Draws every figure of the families in `views` into `out`; returns {role: file name}."""
    points = views["flce"]["points"] if "flce" in views else []
    att = views.get("attention")
    path = lambda role: os.path.join(out, FIGURES[role])
    fig_time_vs_N(plt, points, att, path("time"))
    fig_cost(plt, [(f, v["cost"]) for f, v in views.items()], path("cost"))
    fig_memory(plt, points, att, path("memory"))
    fig_noise(plt, points, att, path("noise"))
    fig_invariance(plt, [(f, v["classes"]) for f, v in views.items()], path("invariance"))
    family_panels(plt, views, path("adders_time"), draw_time_vs_adders)
    family_panels(plt, views, path("adders_noise"), draw_noise_vs_adders)
    rows = max([len(sm_matrix(v, OUTPUT[f])[0]) for f, v in views.items()] or [0])
    family_panels(plt, views, path("sms"), draw_bits_vs_sms, height=max(3.0, 0.16 * rows + 1.5))
    return dict(FIGURES)
