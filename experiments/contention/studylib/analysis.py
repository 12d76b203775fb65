"""Analysis: the sweeps' points, fastest variants, crossovers, cost of determinism, invariance
classes and noise rows, computed from the loaded results (no plotting, no text)."""

from collections import defaultdict

from .load import shape_order


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


def views(fams):
    """{"flce": {...}, "attention": {...}} (the families present): each family's results ("all") and
    axes, its sweeps' points, its cost of determinism and invariance classes."""
    out = {}
    if "flce" in fams:
        f = fams["flce"]
        out["flce"] = {"axes": f["axes"], "all": f["all"], "points": contention_points(f["all"], f["axes"])}
    if "attention" in fams:
        a = fams["attention"]
        res, axes = a["all"], a["axes"]
        for r in res:
            r["group"] = r["H"] // r["Hkv"]
        out["attention"] = {"axes": axes, "all": res, "sweep": attention_sweep(res, axes, False),
                            "causal": attention_sweep(res, axes, True), "gqa": attention_gqa(res, axes)}
    for v in out.values():
        v["cost"] = cost_of_determinism(v["all"])
        v["classes"] = invariance_classes(v["all"])
    return out
