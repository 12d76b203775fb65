"""Loading: the studies, their results and the records' fields, read from the store (sqlite3, read-only)."""

import json
import os
import sqlite3
import sys
from collections import defaultdict


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
    # runs.sms (schema v5): the SMs of the run's measurements; older stores have none (whole device).
    has_sms = any(c[1] == "sms" for c in con.execute("PRAGMA table_info(runs)"))
    return con.execute(
        """
        SELECT x.id AS rid, x.device_id, x.build_id, x.problem_id, x.variant_id, u.uid AS run_uid,
               %s AS run_sms, dv.sm_count AS device_sms,
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
        """ % ("u.sms" if has_sms else "NULL"), (study["name"],)).fetchall()


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
    """The study's latest ok result per (device, problem, variant, SM count), as dicts; r["sms"] is the
    SMs the result was measured on (runs.sms; the device's count for older runs), r["whole"] whether
    that is the whole device."""
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
        sms = r["run_sms"] if r["run_sms"] is not None else r["device_sms"]
        latest[(r["problem_id"], r["variant_id"], sms)] = dict(r, sms=sms, whole=sms == r["device_sms"])  # last wins
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
        first = con.execute("SELECT output, digest FROM digests WHERE result_id = ? AND repeat = 0 ORDER BY output",
                            (r["rid"],)).fetchall()
        r["first_digests"] = tuple(g["digest"] for g in first)
        r["digest_of"] = {g["output"]: g["digest"] for g in first}
        r["distinct"] = {o["output"]: o["distinct_digests"] for o in con.execute(
            "SELECT output, distinct_digests FROM determinism_outputs WHERE result_id = ?", (r["rid"],))}
        # Schema v6: every level above none (sm_count, config, portable) implies run_to_run.
        r["deterministic"] = bool(r["by_design"]) and r["level"] not in (None, "none")
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


def key_blocks(r):
    """Key blocks adding into one dQ tile: Sk / bc of the variant (None without bc)."""
    bc = r["knobs"].get("bc")
    return -(-r["Sk"] // bc) if bc else None


def load_studies(con, names, device_query):
    """(studies with results on the device, device, every result, {family: {"axes", "all"}}): the
    studies named (or the newest of each family), their latest ok results on one device."""
    studies = pick_studies(con, names)
    rows = {st["name"]: query_results(con, st) for st in studies}
    for st in studies:
        if not rows[st["name"]]:
            die("study %s has no ok results" % st["name"])
    device = pick_device(rows, device_query)
    results, fams = [], {}
    for st in studies:
        res, _ = load(con, st, device_query, rows[st["name"]], device)
        if not res:
            continue  # measured on another device only
        results.extend(res)
        fam = {r["family"] for r in res}
        if len(fam) == 1 and next(iter(fam)) in FAMILIES and next(iter(fam)) not in fams:
            # "all": on the whole device (every analysis); "by_sms": every result, for the SM-count axis.
            fams[next(iter(fam))] = {"axes": json.loads(st["axes"] or "{}"), "all": [r for r in res if r["whole"]],
                                     "by_sms": res}
        else:
            die("study %s: give one study per kernel family (%s already chosen, or mixed families)" % (
                st["name"], "/".join(sorted(fam))))
    if not results:
        die("no ok results of the studies on device %s" % device[1])
    return [st for st in studies if any(r["study"] == st["name"] for r in results)], device, results, fams
