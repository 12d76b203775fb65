#!/usr/bin/env python3
"""Figures and REPORT.md of the contention study (issue 10), read from the store.

    python3 experiments/contention/plot.py --db study.db [--study NAME ...] [--out DIR]

Reads the detfuse SQLite store directly (sqlite3, read-only) and writes into
--out (default: this script's folder) five PNG figures and REPORT.md. Every
number in the report is computed here from the store; nothing is typed by hand.
Needs Python 3 and matplotlib only (Debian: python3-matplotlib).

Which results: the studies' runs (runs.study = NAME; --study may be given once
per study; default the newest study with results of each kernel family, FLCE
and attention), their final `ok` results, on one device (--device, a name or
UUID prefix; default the device with the most results). When a (problem,
variant) was measured more than once (a resumed or repeated study), the latest
result counts. Each figure has a panel per family that has data; the report
has the FLCE sections, then the attention sections, for the families present.
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


def study_family(con, r):
    """A study's kernel family: its axes' "family", else its results' problem family."""
    try:
        fam = json.loads(r["axes"] or "{}").get("family")
    except ValueError:
        fam = None
    if fam:
        return fam
    row = con.execute("SELECT p.family FROM results x JOIN runs u ON u.id = x.run_id "
                      "JOIN problems p ON p.id = x.problem_id WHERE u.study = ? LIMIT 1", (r["name"],)).fetchone()
    return row[0] if row else "?"


def ok_count(con, name):
    return con.execute("SELECT count(*) FROM results x JOIN runs u ON u.id = x.run_id "
                       "WHERE u.study = ? AND x.status = 'ok'", (name,)).fetchone()[0]


def pick_studies(con, names):
    """The studies named (in that order), or the newest study with ok results of each family."""
    rows = con.execute("SELECT id, name, kind, axes, created_at FROM studies ORDER BY id DESC").fetchall()
    if not rows:
        die("no study in the store (run `detfuse study contention --kernel flce --quick --db ...` first)")
    out = []
    if names:
        for name in names:
            match = [r for r in rows if r["name"] == name]
            if not match:
                die("no study named %s" % name)
            if any(o["name"] == name for o in out):
                continue
            out.append(match[0])
        return out
    seen = set()
    for r in rows:
        fam = study_family(con, r)
        if fam in seen or not ok_count(con, r["name"]):
            continue
        seen.add(fam)
        out.append(r)
    if not out:
        die("no study with ok results")
    # FLCE first, then attention, then anything else: the report's order.
    order = {f: i for i, f in enumerate(FAMILIES)}
    out.sort(key=lambda r: order.get(study_family(con, r), len(order)))
    return out


def query_results(con, study):
    return con.execute(
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


def pick_device(rows_by_study, device_query):
    """(device id, name, uuid): --device's match, else the device with the most results."""
    by_device = defaultdict(int)
    for rows in rows_by_study.values():
        for r in rows:
            by_device[(r["device_id"], r["device_name"], r["device_uuid"])] += 1
    devices = sorted(by_device.items(), key=lambda kv: -kv[1])
    if device_query:
        q = device_query.lower()
        devices = [d for d in devices if d[0][2].lower().startswith(q) or d[0][1].lower().startswith(q)]
        if not devices:
            die("no device matching %s in study %s" % (device_query, ", ".join(rows_by_study)))
    return devices[0][0]


def load(con, study, device_query, rows=None, device=None):
    """The study's latest ok result per (device, problem, variant), as dicts."""
    if rows is None:
        rows = query_results(con, study)
    if not rows:
        die("study %s has no ok results" % study["name"])
    if device is None:
        device = pick_device({study["name"]: rows}, device_query)
    device_id = device[0]

    latest = {}
    for r in rows:
        if r["device_id"] != device_id:
            continue
        latest[(r["problem_id"], r["variant_id"])] = dict(r)  # ordered by id: the last wins
    results = list(latest.values())
    dims = defaultdict(dict)
    for r in con.execute("SELECT problem_id, dim, value FROM problem_dims"):
        dims[r["problem_id"]][r["dim"]] = r["value"]
    for r in results:
        r["study"] = study["name"]
        r.update(dims[r["problem_id"]])
        if r["family"] == "attention":
            r.update(attention_key_fields(r["problem_key"]))
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
    return results, device


def attention_key_fields(key):
    """d and causal (not among the store's problem dims) from 'attention:B=..,d=128,causal=1,...'."""
    out = {}
    for part in key.split(":", 1)[-1].split(","):
        k, _, v = part.partition("=")
        if k == "d":
            out["d"] = int(v)
        elif k == "causal":
            out["causal"] = v == "1"
        elif k in ("B", "H", "Hkv", "Sq", "Sk"):
            out.setdefault(k, int(v))
    return out


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
    """FLCE 'N,D,V'; attention 'B,H,Hkv,Sq,Sk,d[,causal]' (as `detfuse study --plan` prints it)."""
    if r["family"] == "attention":
        return "%d,%d,%d,%d,%d,%d%s" % (r["B"], r["H"], r["Hkv"], r["Sq"], r["Sk"], r["d"],
                                        ",causal" if r["causal"] else "")
    return "%d,%d,%d" % (r["N"], r["D"], r["V"])


def shape_order(r):
    if r["family"] == "attention":
        return (r["causal"], r["H"] // r["Hkv"], r["Sk"], r["B"])
    return (r["V"], r["D"], r["N"])


def fmt_ms(x):
    return "%.3f ms" % x if x < 100 else "%.1f ms" % x


def fmt_sci(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "%.2e" % x


def key_blocks(r):
    """Key blocks adding into one dQ tile: Sk / bc of the variant (None without bc)."""
    bc = r["knobs"].get("bc")
    return -(-r["Sk"] // bc) if bc else None


# ----------------------------------------------------------------------------- analysis

def contention_points(results, axes):
    """FLCE results of the contention sweep (fixed D, V), by N."""
    D, V = axes.get("D"), axes.get("V")
    return [r for r in results if r["family"] == "flce" and r["D"] == D and r["V"] == V]


def attention_sweep(results, axes, causal):
    """Attention results of the Sq = Sk sweep (H = Hkv at the axes' H and d), causal or not, by Sk."""
    H, d = axes.get("H"), axes.get("d")
    return [r for r in results if r["family"] == "attention" and r["causal"] == causal and r["H"] == H
            and r["Hkv"] == H and r["d"] == d and r["Sq"] == r["Sk"]]


def attention_gqa(results, axes):
    """Attention results of the GQA sweep (non-causal at S_gqa), by group size H / Hkv."""
    H, d, S = axes.get("H"), axes.get("d"), axes.get("S_gqa")
    return [r for r in results if r["family"] == "attention" and not r["causal"] and r["H"] == H
            and r["d"] == d and r["Sk"] == S and r["Sq"] == S]


def best_by(rows, key):
    """{key(r): fastest r}."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["median_ms"] < best[k]["median_ms"]:
            best[k] = r
    return best


def crossovers(points, xkey="N", xname="N"):
    """Sentences: where the fastest variant of one strategy overtakes another's along xkey."""
    best = best_by(points, lambda r: (r["strategy"], r[xkey]))
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
                lines.append("- `%s` beats `%s` at every %s measured (%d to %d); %s/%s time ratio %.2f to %.2f." % (
                    w, l, xname, common[0], common[-1], a, b, min(ratio(n) for n in common),
                    max(ratio(n) for n in common)))
            for lo, hi in flips:
                before = a if best[(a, lo)]["median_ms"] < best[(b, lo)]["median_ms"] else b
                after = b if before == a else a
                lines.append("- crossover `%s` -> `%s` between %s=%d (%s/%s = %.2f) and %s=%d (%.2f)." % (
                    before, after, xname, lo, a, b, ratio(lo), xname, hi, ratio(hi)))
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
    out.sort(key=lambda t: shape_order(t[0]))
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


def noise_rows(points, output="dW", xkey="N"):
    """(x, result, rel spread ||x_r - x_0|| / ||x_0||, max|x_r - x_0| / ||x_0||, error vs float64) of
    `output` (FLCE dW; attention dQ, whose error is the full-size run's slice check when the
    problem was checked on a slice)."""
    out = []
    for r in points:
        sp = r["spread"].get(output)
        err = r["errors"].get(output + "@slice", r["errors"].get(output))
        if sp is None or not sp["norm"]:
            continue
        out.append((r[xkey], r, sp["diff_norm"] / sp["norm"], sp["max_abs_diff"] / sp["norm"], err))
    return out


# ----------------------------------------------------------------------------- figures

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
            bot.set_xlabel("N (rows; N / bm row blocks add into each dW tile)")
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


def draw_memory_flce(axs, points):
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


def draw_memory_attention(axs, sweep):
    mib = 1 << 20
    # Every strategy: peak extra memory against Sk (owning: the D vector only;
    # atomic: + the fp32 dQ accumulator; partials: + the slab, bounded by mb).
    ax = axs[0]
    lines = defaultdict(list)
    for r in sweep:
        lines[(r["strategy"], r["engine"], r["variant"].split(".", 4)[-1])].append(
            (r["Sk"], r["peak_extra_bytes"] / mib))
    for (strat, eng, params), xy in sorted(lines.items()):
        xy.sort()
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", color=STRATEGY_COLOR.get(strat, "gray"),
                linestyle=ENGINE_STYLE.get(eng, "-"), label="%s %s %s" % (eng, strat, params))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("Sq = Sk (B*S about constant)")
    ax.set_ylabel("peak extra device memory (MiB)")
    ax.set_title("attention: memory vs Sk (owning, atomic, partials mb, ...)")
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6)
    # Partials: peak extra memory and time against the workspace bound mb, one point per (variant, Sk).
    ax = axs[1]
    lines = defaultdict(list)
    for r in sweep:
        if r["strategy"] == "partials" and "mb" in r["knobs"]:
            lines[(r["engine"], tile_of(r), r["Sk"])].append((r["knobs"]["mb"], r["peak_extra_bytes"] / mib))
    for (eng, tile, sk), xy in sorted(lines.items()):
        xy.sort()
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="s", linestyle=ENGINE_STYLE.get(eng, "-"),
                label="%s %s Sk=%d" % (eng, tile, sk))
    ax.set_xlabel("partials workspace bound mb (MiB)")
    ax.set_ylabel("peak extra device memory (MiB)")
    ax.set_title("attention partials: memory vs workspace bound mb")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6, ncol=2)


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
        panels.append(("N", noise_rows(points), "dW", "Atomic noise vs N, beside the error against float64"))
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


# ----------------------------------------------------------------------------- report

def report_header(L, args, studies, device, results):
    commits = sorted({r["git_commit"] for r in results})
    runs = sorted({r["run_uid"] for r in results})
    first = min(r["recorded_at"] for r in results)
    last = max(r["recorded_at"] for r in results)
    names = [st["name"] for st in studies]
    L.append("# Contention study: %s" % ", ".join(names))
    L.append("")
    L.append("Generated by `experiments/contention/plot.py` from the store; every number below is read from it.")
    L.append("")
    for cmd in sorted({r["command_line"] for r in results if r["command_line"]}):
        L.append("- measured by: `%s`" % cmd)
    L.append("- regenerate: `python3 experiments/contention/plot.py --db %s%s%s`" % (
        args.db, "".join(" --study " + n for n in names), "" if args.out is None else " --out " + args.out))
    L.append("- device: %s (%s)" % (device[1], device[2]))
    L.append("- detfuse build(s): %s" % ", ".join("`%s`" % c for c in commits))
    L.append("- runs: %s; results recorded %s to %s" % (", ".join("`%s`" % u for u in runs), first, last))
    L.append("- measured: %d (problem, variant) results over %d problems and %d variants" % (
        len(results), len({r["problem_id"] for r in results}), len({r["variant"] for r in results})))
    for st in studies:
        L.append("- study axes%s: `%s`" % ("" if len(studies) == 1 else " (%s)" % st["name"], st["axes"]))
    L.append("")


def cost_table(L, cost, what):
    L.append("| problem %s | best overall | best deterministic (run_to_run) | ratio |" % what)
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


def invariance_table(L, classes, what):
    L.append("Deterministic (run_to_run) variants grouped by identical bits of every output (repeat 0 digests).")
    L.append("")
    L.append("| problem %s | deterministic variants | classes | largest class |" % what)
    L.append("|---|---|---|---|")
    for pid in sorted(classes, key=lambda p: shape_order(classes[p][0])):
        r0, groups = classes[pid]
        L.append("| %s | %d | %d | %d |" % (shape_label(r0), sum(len(g) for g in groups), len(groups), len(groups[0])))
    L.append("")


def flce_sections(L, axes, points, cost, classes, figures):
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
    cost_table(L, cost, "N,D,V")

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
    invariance_table(L, classes, "N,D,V")


def attention_time_table(L, rows, xkey, xname, extra_cols):
    """Fastest variant per strategy at each x; extra_cols: [(header, fn(x, rows at x))]."""
    best = best_by(rows, lambda r: (r["strategy"], r[xkey]))
    xs = sorted({x for _, x in best})
    strategies = sorted({s for s, _ in best})
    if not xs:
        return
    L.append("| %s | %s" % (xname, "".join("%s | " % h for h, _ in extra_cols)) +
             " | ".join("fastest `%s`" % s for s in strategies) + " |")
    L.append("|---|" + "---|" * (len(extra_cols) + len(strategies)))
    for x in xs:
        at = [r for r in rows if r[xkey] == x]
        cells = []
        for s in strategies:
            r = best.get((s, x))
            if not r:
                cells.append("-")
                continue
            kb = key_blocks(r)
            cells.append("%s (%.0f TFLOP/s, `%s`%s)" % (fmt_ms(r["median_ms"]), r["tflops"], r["engine"],
                                                         ", %d key blocks per dQ tile" % kb if kb else ""))
        L.append("| %d | %s" % (x, "".join("%s | " % fn(x, at) for _, fn in extra_cols)) + " | ".join(cells) + " |")
    L.append("")


def attention_sections(L, att, cost, classes, figures):
    a = att["axes"]
    batch = lambda x, at: ",".join(sorted({str(r["B"]) for r in at}))
    L.append("## Attention: time per strategy against contention (Sq = Sk at B*S about %s, H=%s, d=%s)" % (
        a.get("tokens"), a.get("H"), a.get("d")))
    L.append("")
    L.append("![time vs contention](%s)" % figures["time"])
    L.append("")
    L.append("Forward+backward; the strategies concern dQ, where Sk / bc key blocks add into each dQ tile "
             "(dK, dV are owned by key blocks in every strategy).")
    L.append("")
    if att["sweep"]:
        L.append("Non-causal:")
        L.append("")
        attention_time_table(L, att["sweep"], "Sk", "Sk", [("B", batch)])
        L.append("Crossovers, non-causal (fastest variant of each strategy, any engine):")
        L.append("")
        L.extend(crossovers(att["sweep"], "Sk", "Sk") or
                 ["- fewer than two Sk with two strategies measured: no crossover to state."])
        L.append("")
    if att["causal"]:
        L.append("Causal (a query block receives from the key blocks it sees only: about half as many on average):")
        L.append("")
        attention_time_table(L, att["causal"], "Sk", "Sk", [("B", batch)])
        cl = crossovers(att["causal"], "Sk", "Sk")
        if cl:
            L.append("Crossovers, causal:")
            L.append("")
            L.extend(cl)
            L.append("")
        # Causal against non-causal at the same Sk: what masking does to each strategy.
        nc = best_by(att["sweep"], lambda r: (r["strategy"], r["Sk"]))
        c = best_by(att["causal"], lambda r: (r["strategy"], r["Sk"]))
        both = sorted(k for k in c if k in nc)
        if both:
            strategies = sorted({s for s, _ in both})
            L.append("Causal / non-causal time of the fastest variant of each strategy (the FLOP count halves):")
            L.append("")
            L.append("| Sk | " + " | ".join("`%s`" % s for s in strategies) + " |")
            L.append("|---|" + "---|" * len(strategies))
            for x in sorted({x for _, x in both}):
                L.append("| %d | %s |" % (x, " | ".join(
                    "%.3f" % (c[(s, x)]["median_ms"] / nc[(s, x)]["median_ms"]) if (s, x) in c and (s, x) in nc
                    else "-" for s in strategies)))
            L.append("")
    if len({r["group"] for r in att["gqa"]}) > 1:
        L.append("GQA (non-causal, Sq = Sk = %s; H / Hkv query heads add into each dK, dV tile):" % a.get("S_gqa"))
        L.append("")
        hkv = lambda x, at: ",".join(sorted({str(r["Hkv"]) for r in at}))
        attention_time_table(L, att["gqa"], "group", "H/Hkv", [("Hkv", hkv)])
        L.append("Crossovers along the group size:")
        L.append("")
        L.extend(crossovers(att["gqa"], "group", "H/Hkv") or
                 ["- no strategy overtakes another along the group size measured."])
        L.append("")

    L.append("## Attention: cost of determinism")
    L.append("")
    L.append("![cost of determinism](%s)" % figures["cost"])
    L.append("")
    cost_table(L, cost, "B,H,Hkv,Sq,Sk,d")

    L.append("## Attention: memory against the partials workspace bound")
    L.append("")
    L.append("![memory](%s)" % figures["memory"])
    L.append("")
    Ss = sorted({r["Sk"] for r in att["sweep"]})
    mem = best_by([r for r in att["sweep"] if r["Sk"] == max(Ss)] if Ss else [], lambda r: r["variant"])
    if mem:
        L.append("Peak extra device memory at Sk=%d (non-causal; beyond inputs and outputs):" % max(Ss))
        L.append("")
        L.append("| variant | peak extra (MiB) | time |")
        L.append("|---|---|---|")
        for name in sorted(mem, key=lambda n: (mem[n]["peak_extra_bytes"], n)):
            r = mem[name]
            L.append("| `%s` | %.0f | %s |" % (name, r["peak_extra_bytes"] / (1 << 20), fmt_ms(r["median_ms"])))
        L.append("")

    L.append("## Attention: atomic noise against Sk, beside the error against float64")
    L.append("")
    L.append("![atomic noise](%s)" % figures["noise"])
    L.append("")
    nrows = [t for t in noise_rows(att["all"], "dQ", "Sk") if t[1]["strategy"] == "atomic"]
    if nrows:
        L.append("Spread: repeat r against repeat 0, the largest over the repeats, relative to the L2 norm "
                 "of dQ: L2 = norm(dQ_r - dQ_0) / norm(dQ_0), max = max abs(dQ_r - dQ_0) / norm(dQ_0). "
                 "Error: the tuner's relative L2 error of dQ against the float64 reference (on the checked "
                 "slice of the full-size run when the problem is large).")
        L.append("")
        L.append("| problem B,H,Hkv,Sq,Sk,d | atomic variant | key blocks per dQ tile | distinct dQ digests / repeats "
                 "| spread L2 | spread max | dQ error vs float64 | what the error checked |")
        L.append("|---|---|---|---|---|---|---|---|")
        for x, r, rel, mx, err in sorted(nrows, key=lambda t: (shape_order(t[1]), t[1]["variant"])):
            kb = key_blocks(r)
            L.append("| %s | `%s` | %s | %s / %s | %s | %s | %s | %s |" % (
                shape_label(r), r["variant"], kb if kb else "?", r["distinct"].get("dQ", "?"), r["repeats"],
                fmt_sci(rel), fmt_sci(mx), fmt_sci(err), r.get("checked_what", "")))
        L.append("")
    else:
        L.append("No atomic result with a stored spread in this study.")
        L.append("")

    L.append("## Attention: config-invariance classes per shape")
    L.append("")
    L.append("![invariance](%s)" % figures["invariance"])
    L.append("")
    invariance_table(L, classes, "B,H,Hkv,Sq,Sk,d")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the detfuse store")
    ap.add_argument("--study", action="append",
                    help="a study's name, repeatable (default: the newest study with results of each family)")
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
    con = connect(args.db)
    studies = pick_studies(con, args.study)
    rows = {st["name"]: query_results(con, st) for st in studies}
    for st in studies:
        if not rows[st["name"]]:
            die("study %s has no ok results" % st["name"])
    device = pick_device(rows, args.device)
    results, flce, att = [], None, None
    for st in studies:
        res, _ = load(con, st, args.device, rows[st["name"]], device)
        if not res:
            continue  # measured on another device only
        results.extend(res)
        axes = json.loads(st["axes"] or "{}")
        fam = {r["family"] for r in res}
        if fam == {"flce"} and flce is None:
            flce = {"axes": axes, "all": res}
        elif fam == {"attention"} and att is None:
            for r in res:
                r["group"] = r["H"] // r["Hkv"]
            att = {"axes": axes, "all": res, "sweep": attention_sweep(res, axes, False),
                   "causal": attention_sweep(res, axes, True), "gqa": attention_gqa(res, axes)}
        else:
            die("study %s: give one study per kernel family (%s already chosen, or mixed families)" % (
                st["name"], "/".join(sorted(fam))))
    if not results:
        die("no ok results of the studies on device %s" % device[1])
    os.makedirs(out, exist_ok=True)
    points = contention_points(flce["all"], flce["axes"]) if flce else []
    cost = {f: cost_of_determinism(d["all"]) for f, d in (("flce", flce), ("attention", att)) if d}
    classes = {f: invariance_classes(d["all"]) for f, d in (("flce", flce), ("attention", att)) if d}
    figures = {"time": "time_vs_N.png", "cost": "cost_of_determinism.png", "memory": "memory.png",
               "noise": "atomic_noise.png", "invariance": "invariance_classes.png"}
    fig_time_vs_N(plt, points, att, os.path.join(out, figures["time"]))
    fig_cost(plt, list(cost.items()), os.path.join(out, figures["cost"]))
    fig_memory(plt, points, att, os.path.join(out, figures["memory"]))
    fig_noise(plt, points, att, os.path.join(out, figures["noise"]))
    fig_invariance(plt, list(classes.items()), os.path.join(out, figures["invariance"]))
    L = []
    report_header(L, args, [st for st in studies if any(r["study"] == st["name"] for r in results)], device, results)
    if flce:
        flce_sections(L, flce["axes"], points, cost["flce"], classes["flce"], figures)
    if att:
        attention_sections(L, att, cost["attention"], classes["attention"], figures)
    with open(os.path.join(out, "REPORT.md"), "w") as f:
        f.write("\n".join(L))
    print("wrote %s and %d figures into %s" % ("REPORT.md", len(figures), out))


if __name__ == "__main__":
    main()
