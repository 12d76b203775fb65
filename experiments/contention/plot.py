#!/usr/bin/env python3
"""Figures and REPORT.md of the contention study (issue 10), read from the store.

    python3 experiments/contention/plot.py --db study.db [--study NAME] [--out DIR]

Reads the detfuse SQLite store directly (sqlite3, read-only) and writes into
--out (default: this script's folder) five PNG figures and REPORT.md. Every
number in the report is computed here from the store; nothing is typed by hand.
Needs Python 3 and matplotlib only (Debian: python3-matplotlib).

Which results: the study's runs (runs.study = NAME; default the newest study
with results), their final `ok` results, on one device (--device, a name or
UUID prefix; default the device with the most results). When a (problem,
variant) was measured more than once (a resumed or repeated study), the latest
result counts.
"""

import argparse
import json
import math
import os
import sqlite3
import sys
from collections import defaultdict

# The strategy colours and the (engine) line styles of every figure.
STRATEGY_COLOR = {"atomic": "tab:red", "partials": "tab:blue", "owning": "tab:green", "ordered": "tab:purple"}
ENGINE_STYLE = {"mma": "-", "wgmma": "--", "cublaslt": ":", "fma": "-."}
FAMILIES = ["flce", "attention"]


def die(msg, code=2):
    print("plot.py: " + msg, file=sys.stderr)
    sys.exit(code)


def connect(path):
    if not os.path.exists(path):
        die("no such database: " + path)
    con = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version < 4:
        die("%s has schema v%d; the study tables need v4 (open it once with a current detfuse)" % (path, version))
    return con


def pick_study(con, name):
    rows = con.execute("SELECT id, name, kind, axes, created_at FROM studies ORDER BY id DESC").fetchall()
    if not rows:
        die("no study in the store (run `detfuse study contention --kernel flce --quick --db ...` first)")
    for r in rows:
        if name and r["name"] != name:
            continue
        n = con.execute("SELECT count(*) FROM results x JOIN runs u ON u.id = x.run_id "
                        "WHERE u.study = ? AND x.status = 'ok'", (r["name"],)).fetchone()[0]
        if n or name:
            return r
    die("no study named %s" % name if name else "no study with ok results")


def load(con, study, device_query):
    """The study's latest ok result per (device, problem, variant), as dicts."""
    rows = con.execute(
        """
        SELECT x.id AS rid, x.device_id, x.build_id, x.problem_id, x.variant_id, u.uid AS run_uid,
               u.command_line, x.recorded_at,
               v.name AS variant, v.engine, v.strategy, v.deterministic_by_design AS by_design,
               p.family, p.key AS problem_key,
               t.median_ms, t.min_ms, t.max_ms, t.tflops, t.flops, t.peak_extra_bytes,
               d.level, d.repeats,
               dv.name AS device_name, dv.uuid AS device_uuid,
               b.git_commit, b.version
        FROM results x
        JOIN runs u ON u.id = x.run_id
        JOIN variants v ON v.id = x.variant_id
        JOIN problems p ON p.id = x.problem_id
        JOIN timing t ON t.result_id = x.id
        LEFT JOIN determinism d ON d.result_id = x.id
        JOIN devices dv ON dv.id = x.device_id
        JOIN builds b ON b.id = x.build_id
        WHERE u.study = ? AND x.status = 'ok'
        ORDER BY x.id
        """, (study["name"],)).fetchall()
    if not rows:
        die("study %s has no ok results" % study["name"])
    by_device = defaultdict(int)
    for r in rows:
        by_device[(r["device_id"], r["device_name"], r["device_uuid"])] += 1
    devices = sorted(by_device.items(), key=lambda kv: -kv[1])
    if device_query:
        q = device_query.lower()
        devices = [d for d in devices if d[0][2].lower().startswith(q) or d[0][1].lower().startswith(q)]
        if not devices:
            die("no device matching %s in study %s" % (device_query, study["name"]))
    device_id = devices[0][0][0]

    latest = {}
    for r in rows:
        if r["device_id"] != device_id:
            continue
        latest[(r["problem_id"], r["variant_id"])] = dict(r)  # ordered by id: the last wins
    results = list(latest.values())
    dims = defaultdict(dict)
    for r in con.execute("SELECT problem_id, dim, value FROM problem_dims"):
        dims[r["problem_id"]][r["dim"]] = r["value"]
    params = {}
    for r in results:
        r.update(dims[r["problem_id"]])
        r["knobs"] = parse_params(r["variant"])
        r["errors"] = {e["output"]: e["error"] for e in con.execute(
            "SELECT output, error FROM correctness_errors WHERE result_id = ?", (r["rid"],))}
        cw = con.execute("SELECT checked_what FROM correctness WHERE result_id = ?", (r["rid"],)).fetchone()
        r["checked_what"] = cw["checked_what"] if cw else ""
        r["spread"] = {s["output"]: dict(s) for s in con.execute(
            "SELECT output, max_abs_diff, diff_norm, norm FROM determinism_spread WHERE result_id = ?", (r["rid"],))}
        r["first_digests"] = tuple(g["digest"] for g in con.execute(
            "SELECT digest FROM digests WHERE result_id = ? AND repeat = 0 ORDER BY output", (r["rid"],)))
        r["distinct"] = {o["output"]: o["distinct_digests"] for o in con.execute(
            "SELECT output, distinct_digests FROM determinism_outputs WHERE result_id = ?", (r["rid"],))}
        r["deterministic"] = bool(r["by_design"]) and r["level"] == "run_to_run"
    return results, devices[0][0]


def parse_params(name):
    """{'bm': 128, 'mb': 1024, ...} from 'flce.bf16.mma.owning.bm128_..._mb1024'."""
    out = {}
    parts = name.split(".")
    if len(parts) != 5:
        return out
    for tok in parts[4].split("_"):
        i = 0
        while i < len(tok) and tok[i].isalpha():
            i += 1
        try:
            out[tok[:i]] = int(tok[i:])
        except ValueError:
            pass
    return out


def tile_of(r):
    return "_".join("%s%d" % (k, v) for k, v in r["knobs"].items() if k not in ("mb", "sk", "vs")) or "-"


def shape_label(r):
    return "%d,%d,%d" % (r["N"], r["D"], r["V"])


def fmt_ms(x):
    return "%.3f ms" % x if x < 100 else "%.1f ms" % x


def fmt_sci(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "%.2e" % x


# ----------------------------------------------------------------------------- analysis

def contention_points(results, axes):
    """Results of the contention sweep (fixed D, V), by N."""
    D, V = axes.get("D"), axes.get("V")
    return [r for r in results if r["family"] == "flce" and r["D"] == D and r["V"] == V]


def best_by(rows, key):
    """{key(r): fastest r}."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["median_ms"] < best[k]["median_ms"]:
            best[k] = r
    return best


def crossovers(points):
    """Sentences: where the fastest variant of one strategy overtakes another's along N."""
    best = best_by(points, lambda r: (r["strategy"], r["N"]))
    strategies = sorted({s for s, _ in best})
    Ns = sorted({n for _, n in best})
    lines = []
    for i, a in enumerate(strategies):
        for b in strategies[i + 1:]:
            common = [n for n in Ns if (a, n) in best and (b, n) in best]
            if len(common) < 2:
                continue
            sign = [best[(a, n)]["median_ms"] < best[(b, n)]["median_ms"] for n in common]
            flips = [(common[k], common[k + 1]) for k in range(len(common) - 1) if sign[k] != sign[k + 1]]
            ratio = lambda n: best[(a, n)]["median_ms"] / best[(b, n)]["median_ms"]
            if not flips:
                w, l = (a, b) if sign[0] else (b, a)
                lines.append("- `%s` beats `%s` at every N measured (%d to %d); %s/%s time ratio %.2f to %.2f." % (
                    w, l, common[0], common[-1], a, b, min(ratio(n) for n in common), max(ratio(n) for n in common)))
            for lo, hi in flips:
                before = a if best[(a, lo)]["median_ms"] < best[(b, lo)]["median_ms"] else b
                after = b if before == a else a
                lines.append("- crossover `%s` -> `%s` between N=%d (%s/%s = %.2f) and N=%d (%.2f)." % (
                    before, after, lo, a, b, ratio(lo), hi, ratio(hi)))
    return lines


def cost_of_determinism(results):
    """Per problem: (best overall, best deterministic, ratio)."""
    out = []
    by_problem = defaultdict(list)
    for r in results:
        by_problem[r["problem_id"]].append(r)
    for pid, rows in by_problem.items():
        overall = min(rows, key=lambda r: r["median_ms"])
        det = [r for r in rows if r["deterministic"]]
        best_det = min(det, key=lambda r: r["median_ms"]) if det else None
        out.append((overall, best_det, best_det["median_ms"] / overall["median_ms"] if best_det else None))
    out.sort(key=lambda t: (t[0]["V"], t[0]["D"], t[0]["N"]))
    return out


def invariance_classes(results):
    """Per problem: the deterministic variants grouped by identical bits (repeat 0, every output)."""
    classes = {}
    by_problem = defaultdict(list)
    for r in results:
        if r["deterministic"] and r["first_digests"]:
            by_problem[r["problem_id"]].append(r)
    for pid, rows in by_problem.items():
        groups = defaultdict(list)
        for r in rows:
            groups[r["first_digests"]].append(r["variant"])
        classes[pid] = (rows[0], sorted(groups.values(), key=lambda g: (-len(g), g)))
    return classes


# ----------------------------------------------------------------------------- figures

def fig_time_vs_N(plt, points, path):
    """Top row: median time of the fastest variant of each (engine, strategy) against N.
    Bottom row: the same divided by the fastest of all at that N (1 = fastest)."""
    fams = [f for f in FAMILIES if f == "flce" or any(p["family"] == f for p in points)]
    fig, axs = plt.subplots(2, len(fams), figsize=(7 * len(fams), 8), squeeze=False, sharex="col")
    for col, fam in enumerate(fams):
        top, bot = axs[0][col], axs[1][col]
        rows = [p for p in points if p["family"] == fam]
        best = best_by(rows, lambda r: (r["engine"], r["strategy"], r["N"]))
        fastest = best_by(rows, lambda r: r["N"])
        for (eng, strat) in sorted({(e, s) for e, s, _ in best}):
            Ns = sorted(n for e, s, n in best if (e, s) == (eng, strat))
            style = dict(marker="o", color=STRATEGY_COLOR.get(strat, "gray"), linestyle=ENGINE_STYLE.get(eng, "-"),
                         label="%s %s" % (eng, strat))
            top.plot(Ns, [best[(eng, strat, n)]["median_ms"] for n in Ns], **style)
            bot.plot(Ns, [best[(eng, strat, n)]["median_ms"] / fastest[n]["median_ms"] for n in Ns], **style)
        top.set_yscale("log")
        top.set_ylabel("median time (ms), fastest variant of the group")
        bot.set_ylabel("time / fastest at this N")
        bot.set_xlabel("N (rows; N / bm row blocks add into each dW tile)")
        for ax in (top, bot):
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.3)
        if rows:
            top.set_title("%s: D=%d, V=%d" % (fam.upper(), rows[0]["D"], rows[0]["V"]))
            top.legend(fontsize=8)
        else:
            top.set_title("%s: no kernels measured yet" % fam)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_cost(plt, cost, path):
    rows = [c for c in cost if c[2] is not None]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 2), 4.5))
    ax.bar(range(len(rows)), [c[2] for c in rows], color="tab:gray")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([shape_label(c[0]) for c in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("best deterministic / best overall (time)")
    ax.set_xlabel("problem N,D,V")
    ax.set_title("Cost of determinism")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_memory(plt, points, path):
    fig, axs = plt.subplots(1, 2, figsize=(13, 4.8))
    mib = 1 << 20
    # Owning: peak extra memory against the chunk budget, one line per (engine, tile, N).
    ax = axs[0]
    lines = defaultdict(list)
    for r in points:
        if r["strategy"] == "owning" and "mb" in r["knobs"]:
            lines[(r["engine"], tile_of(r), r["N"])].append((r["knobs"]["mb"], r["peak_extra_bytes"] / mib))
    for (eng, tile, n), xy in sorted(lines.items()):
        if len(xy) < 2:
            continue
        xy.sort()
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", linestyle=ENGINE_STYLE.get(eng, "-"),
                label="%s %s N=%d" % (eng, tile, n))
    ax.set_xlabel("owning chunk budget mb (MiB)")
    ax.set_ylabel("peak extra device memory (MiB)")
    ax.set_title("owning: memory vs chunk budget")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6, ncol=2)
    # Partials: peak extra memory against N, one line per knob setting (mb, sk, vs).
    ax = axs[1]
    lines = defaultdict(list)
    for r in points:
        if r["strategy"] == "partials":
            k = r["knobs"]
            lines[(r["engine"], tile_of(r), k.get("mb", 0), k.get("sk", 0), k.get("vs", 0))].append(
                (r["N"], r["peak_extra_bytes"] / mib))
    for (eng, tile, mb, sk, vs), xy in sorted(lines.items()):
        xy.sort()
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="s", linestyle=ENGINE_STYLE.get(eng, "-"),
                label="%s %s mb=%d sk=%d vs=%d" % (eng, tile, mb, sk, vs))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N")
    ax.set_ylabel("peak extra device memory (MiB)")
    ax.set_title("partials: memory (workspace bound mb, sk, vs) vs N")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def noise_rows(points):
    """(N, variant, rel spread ||x_r - x_0|| / ||x_0||, max|x_r - x_0| / ||x_0||, error vs float64) of dW."""
    out = []
    for r in points:
        sp = r["spread"].get("dW")
        err = r["errors"].get("dW")
        if sp is None or not sp["norm"]:
            continue
        out.append((r["N"], r, sp["diff_norm"] / sp["norm"], sp["max_abs_diff"] / sp["norm"], err))
    return out


def fig_noise(plt, points, path):
    rows = noise_rows(points)
    fig, ax = plt.subplots(figsize=(9, 5))
    by_var = defaultdict(list)
    for n, r, rel, mx, err in rows:
        by_var[r["variant"]].append((n, rel, mx, err, r))
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
        pts.sort()
        r = pts[0][4]
        col = STRATEGY_COLOR.get(r["strategy"], "gray")
        if r["strategy"] == "atomic":
            for idx, marker, style, what in ((1, "o", "-", "run-to-run spread ||dW_r - dW_0|| / ||dW_0||"),
                                             (2, "^", ":", "max |dW_r - dW_0| / ||dW_0||")):
                xs = [p[0] for p in pts]
                ys = [at_floor(p[idx]) for p in pts]
                face = ["none" if p[idx] == 0 else col for p in pts]
                ax.plot(xs, ys, color=col, linestyle=style, label=what + ": " + r["engine"] + " " + tile_of(r))
                ax.scatter(xs, ys, marker=marker, edgecolors=col, facecolors=face, zorder=3)
        errs = [(p[0], p[3]) for p in pts if p[3] is not None]
        if errs and r["strategy"] in ("atomic", "owning"):
            ax.plot([e[0] for e in errs], [e[1] for e in errs], marker="x", color=col, linestyle="--", alpha=0.5,
                    label="error vs float64 (%s %s)" % (r["engine"], r["strategy"]))
    if zero_drawn:
        ax.axhline(floor, color="gray", linewidth=0.8, linestyle="-.",
                   label="spread = 0 (bitwise-identical repeats), drawn at this floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel("relative to ||dW|| (dW output)")
    ax.set_title("Atomic noise vs N, beside the error against float64")
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, l in zip(handles, labels):
        if l and not l.startswith("_") and l not in seen:
            seen[l] = h
    if seen:
        ax.legend(seen.values(), seen.keys(), fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_invariance(plt, classes, path):
    pids = sorted(classes, key=lambda p: (classes[p][0]["V"], classes[p][0]["D"], classes[p][0]["N"]))
    variants = sorted({v for p in pids for g in classes[p][1] for v in g})
    grid = [[float("nan")] * len(pids) for _ in variants]
    for j, p in enumerate(pids):
        for ci, g in enumerate(classes[p][1]):
            for v in g:
                grid[variants.index(v)][j] = ci
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(pids) + 5), max(3, 0.28 * len(variants) + 1.5)))
    if variants:
        im = ax.imshow(grid, aspect="auto", cmap="tab20", interpolation="nearest", vmin=0, vmax=19)
        for i in range(len(variants)):
            for j in range(len(pids)):
                if not math.isnan(grid[i][j]):
                    ax.text(j, i, "%d" % grid[i][j], ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(variants)))
    ax.set_yticklabels(variants, fontsize=6)
    ax.set_xticks(range(len(pids)))
    ax.set_xticklabels([shape_label(classes[p][0]) for p in pids], rotation=60, ha="right", fontsize=7)
    ax.set_title("Config-invariance classes (same number in a column: identical bits of every output)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- report

def write_report(path, args, study, device, results, points, cost, classes, figures):
    axes = json.loads(study["axes"] or "{}")
    commits = sorted({r["git_commit"] for r in results})
    runs = sorted({r["run_uid"] for r in results})
    first = min(r["recorded_at"] for r in results)
    last = max(r["recorded_at"] for r in results)
    L = []
    L.append("# Contention study: %s" % study["name"])
    L.append("")
    L.append("Generated by `experiments/contention/plot.py` from the store; every number below is read from it.")
    L.append("")
    for cmd in sorted({r["command_line"] for r in results if r["command_line"]}):
        L.append("- measured by: `%s`" % cmd)
    L.append("- regenerate: `python3 experiments/contention/plot.py --db %s --study %s%s`" % (
        args.db, study["name"], "" if args.out is None else " --out " + args.out))
    L.append("- device: %s (%s)" % (device[1], device[2]))
    L.append("- detfuse build(s): %s" % ", ".join("`%s`" % c for c in commits))
    L.append("- runs: %s; results recorded %s to %s" % (", ".join("`%s`" % u for u in runs), first, last))
    L.append("- measured: %d (problem, variant) results over %d problems and %d variants" % (
        len(results), len({r["problem_id"] for r in results}), len({r["variant"] for r in results})))
    L.append("- study axes: `%s`" % study["axes"])
    L.append("")

    L.append("## Time per strategy against contention (N at D=%s, V=%s)" % (axes.get("D"), axes.get("V")))
    L.append("")
    L.append("![time vs N](%s)" % figures["time"])
    L.append("")
    best = best_by(points, lambda r: (r["strategy"], r["N"]))
    Ns = sorted({n for _, n in best})
    strategies = sorted({s for s, _ in best})
    if Ns:
        L.append("| N | " + " | ".join("fastest `%s`" % s for s in strategies) + " |")
        L.append("|---|" + "---|" * len(strategies))
        for n in Ns:
            cells = []
            for s in strategies:
                r = best.get((s, n))
                cells.append("%s (%.0f TFLOP/s, `%s`)" % (fmt_ms(r["median_ms"]), r["tflops"], r["engine"]) if r else "-")
            L.append("| %d | %s |" % (n, " | ".join(cells)))
        L.append("")
    L.append("Crossovers (fastest variant of each strategy, any engine):")
    L.append("")
    L.extend(crossovers(points) or ["- fewer than two N with two strategies measured: no crossover to state."])
    L.append("")

    L.append("## Cost of determinism")
    L.append("")
    L.append("![cost of determinism](%s)" % figures["cost"])
    L.append("")
    L.append("| problem N,D,V | best overall | best deterministic (run_to_run) | ratio |")
    L.append("|---|---|---|---|")
    ratios = []
    for overall, det, ratio in cost:
        if ratio is not None:
            ratios.append(ratio)
        L.append("| %s | `%s` %s | %s | %s |" % (
            shape_label(overall), overall["variant"], fmt_ms(overall["median_ms"]),
            ("`%s` %s" % (det["variant"], fmt_ms(det["median_ms"]))) if det else "none",
            ("%.3f" % ratio) if ratio is not None else "-"))
    L.append("")
    if ratios:
        srt = sorted(ratios)
        L.append("Best deterministic / best overall: median %.3f, min %.3f, max %.3f over %d problems "
                 "(1.000: a deterministic variant is the fastest)." % (
                     srt[len(srt) // 2], srt[0], srt[-1], len(srt)))
        L.append("")

    L.append("## Memory against the owning chunk budget and the partials workspace bound")
    L.append("")
    L.append("![memory](%s)" % figures["memory"])
    L.append("")
    mem = best_by([r for r in points if r["N"] == max(Ns)] if Ns else [], lambda r: r["variant"])
    if mem:
        L.append("Peak extra device memory at N=%d:" % max(Ns))
        L.append("")
        L.append("| variant | peak extra (MiB) | time |")
        L.append("|---|---|---|")
        for name in sorted(mem, key=lambda n: mem[n]["peak_extra_bytes"]):
            r = mem[name]
            L.append("| `%s` | %.0f | %s |" % (name, r["peak_extra_bytes"] / (1 << 20), fmt_ms(r["median_ms"])))
        L.append("")

    L.append("## Atomic noise against N, beside the error against float64")
    L.append("")
    L.append("![atomic noise](%s)" % figures["noise"])
    L.append("")
    nrows = [t for t in noise_rows(points) if t[1]["strategy"] == "atomic"]
    if nrows:
        L.append("Spread: repeat r against repeat 0, the largest over the repeats, relative to the L2 norm "
                 "of dW: L2 = norm(dW_r - dW_0) / norm(dW_0), max = max abs(dW_r - dW_0) / norm(dW_0). "
                 "Error: the tuner's relative L2 error against the float64 reference.")
        L.append("")
        L.append("| N | atomic variant | distinct dW digests / repeats | spread L2 | spread max | dW error vs float64 "
                 "| what the error checked |")
        L.append("|---|---|---|---|---|---|---|")
        for n, r, rel, mx, err in sorted(nrows, key=lambda t: (t[0], t[1]["variant"])):
            L.append("| %d | `%s` | %s / %s | %s | %s | %s | %s |" % (
                n, r["variant"], r["distinct"].get("dW", "?"), r["repeats"], fmt_sci(rel), fmt_sci(mx), fmt_sci(err),
                r.get("checked_what", "")))
        L.append("")
    else:
        L.append("No atomic result with a stored spread in this study.")
        L.append("")

    L.append("## Config-invariance classes per shape")
    L.append("")
    L.append("![invariance](%s)" % figures["invariance"])
    L.append("")
    L.append("Deterministic (run_to_run) variants grouped by identical bits of every output (repeat 0 digests).")
    L.append("")
    L.append("| problem N,D,V | deterministic variants | classes | largest class |")
    L.append("|---|---|---|---|")
    for pid in sorted(classes, key=lambda p: (classes[p][0]["V"], classes[p][0]["D"], classes[p][0]["N"])):
        r0, groups = classes[pid]
        L.append("| %s | %d | %d | %d |" % (shape_label(r0), sum(len(g) for g in groups), len(groups), len(groups[0])))
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the detfuse store")
    ap.add_argument("--study", help="the study's name (default: the newest study with results)")
    ap.add_argument("--device", help="device name or UUID prefix (default: the one with most results)")
    ap.add_argument("--out", help="output folder (default: this script's folder)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        die("matplotlib is needed (Debian: apt-get install python3-matplotlib): %s" % e, 3)

    out = args.out or os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    con = connect(args.db)
    study = pick_study(con, args.study)
    axes = json.loads(study["axes"] or "{}")
    results, device = load(con, study, args.device)
    points = contention_points(results, axes)
    cost = cost_of_determinism(results)
    classes = invariance_classes(results)
    figures = {"time": "time_vs_N.png", "cost": "cost_of_determinism.png", "memory": "memory.png",
               "noise": "atomic_noise.png", "invariance": "invariance_classes.png"}
    fig_time_vs_N(plt, points, os.path.join(out, figures["time"]))
    fig_cost(plt, cost, os.path.join(out, figures["cost"]))
    fig_memory(plt, points, os.path.join(out, figures["memory"]))
    fig_noise(plt, points, os.path.join(out, figures["noise"]))
    fig_invariance(plt, classes, os.path.join(out, figures["invariance"]))
    write_report(os.path.join(out, "REPORT.md"), args, study, device, results, points, cost, classes, figures)
    print("wrote %s and %d figures into %s" % ("REPORT.md", len(figures), out))


if __name__ == "__main__":
    main()
