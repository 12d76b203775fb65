"""Analysis: the sweeps' points, fastest variants, crossovers, cost of determinism, invariance
classes and noise rows, computed from the loaded results (no plotting, no text)."""

from collections import defaultdict

from .load import key_blocks, shape_label, shape_order


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
    for fam, v in out.items():
        v["by_sms"] = fams[fam].get("by_sms", v["all"])
        v["cost"] = cost_of_determinism(v["all"])
        v["classes"] = invariance_classes(v["all"])
    return out


# ----------------------------------------------------------------------------- the contention axes

def flce_adders(r):
    """(concurrent adders per dW element in a chunk, chunks) of an FLCE atomic or partials result:
    the row splits that actually carry rows (kernels/flce/driver.cuh: k_per_split rounds up to bk;
    sk0 is one split per bm row block of the chunk); None for other strategies."""
    k = r["knobs"]
    if r["family"] != "flce" or r["strategy"] not in ("atomic", "partials") or "sk" not in k:
        return None
    lt = r["engine"] == "cublaslt"  # kernels/flce/engine_cublaslt.h: BM 128, BK 64
    bm, bk = k.get("bm", 128), k.get("bk", 64 if lt else 32)
    vp = -(-r["V"] // 8) * 8
    rows = max(bm, ((k.get("mb", 1024) << 20) // (vp * 4)) // bm * bm)
    chunk = min(rows, r["N"])
    sk = k["sk"] if k["sk"] > 0 else -(-chunk // bm)
    kps = -(-(-(-chunk // sk)) // bk) * bk
    return -(-chunk // kps), -(-r["N"] // chunk)


def adders_of(r):
    """The contention level of a result: FLCE concurrent adders per dW element (atomic, partials),
    attention key blocks per dQ tile; None when the variant has none."""
    if r["family"] == "attention":
        return key_blocks(r)
    a = flce_adders(r)
    return a[0] if a else None


def adders_points(view):
    """(problem shape label, results) on the adders axis: FLCE at the problem with the most adder levels
    of atomic (the plan's fixed point N_fixed, D, V when measured); attention the non-causal Sq = Sk sweep."""
    if "sweep" in view:
        return "Sq = Sk sweep (non-causal)", [r for r in view["sweep"] if adders_of(r) is not None]
    by_problem = defaultdict(list)
    for r in view["all"]:
        by_problem[r["problem_id"]].append(r)
    axes = view["axes"]

    def levels(rows):
        return len({adders_of(r) for r in rows if r["strategy"] == "atomic" and adders_of(r) is not None})
    best = None
    for pid, rows in by_problem.items():
        r0 = rows[0]
        fixed = (r0["N"], r0["D"], r0["V"]) == (axes.get("N_fixed"), axes.get("D"), axes.get("V"))
        key = (levels(rows), fixed, r0["N"])
        if best is None or key > best[0]:
            best = (key, rows)
    if best is None:
        return None, []
    rows = best[1]
    return shape_label(rows[0]), rows


def sm_matrix(view, output):
    """The SM-count axis: {(problem_id, variant): {sms: r}} for every (problem, variant) measured on
    more than one SM count, the whole device's SM count, and the SM counts seen (ascending)."""
    cells = defaultdict(dict)
    full = None
    for r in view.get("by_sms", []):
        cells[(r["problem_id"], r["variant"])][r["sms"]] = r
        if r["whole"]:
            full = r["sms"]
    cells = {k: v for k, v in cells.items() if len(v) > 1 and full in v}
    levels = sorted({s for v in cells.values() for s in v})
    return cells, full, levels


def same_bits(a, b, output=None):
    """Repeat-0 digests equal (every output, or one output's)."""
    if output is None:
        return a["first_digests"] == b["first_digests"]
    return a["digest_of"].get(output) == b["digest_of"].get(output)


def sm_verdicts(view, output):
    """Per strategy: (variants compared, variants whose repeat-0 bits of `output` equal the whole
    device's at every SM count, variants whose repeats differ run to run on some SM count)."""
    cells, full, levels = sm_matrix(view, output)
    out = defaultdict(lambda: [0, 0, 0])
    for (pid, name), by in cells.items():
        ref = by[full]
        v = out[ref["strategy"]]
        v[0] += 1
        v[1] += all(same_bits(r, ref, output) for r in by.values())
        v[2] += any(r["distinct"].get(output, 1) > 1 for r in by.values())
    return dict(out), levels, full
