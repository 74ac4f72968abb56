"""The reliability campaign's figures in one table (issue 9):

- schedules fuzzed, miscompiles, crashes: `python -m looptune.testing.fuzz --count N`;
- bad inputs tried and how many got a clear error: the catalogue of tests/test_bad_inputs.py;
- faults injected into a real tuning run (kernels that segfault, hang, abort, run out of
  memory, write NaN or wrong values, do not compile; looptune.testing.faults) and storage
  faults (a full disk, a locked database, two runs sharing one; looptune.testing.soak), and
  how many were classified or handled as they must be;
- kills of a tuning run (SIGKILL at random moments, then resume) and records lost.

Targets: >= 10,000 schedules with 0 miscompiles and 0 crashes; >= 60 bad inputs, all with a
clear error; >= 6 kinds of fault, all classified; 20 kills, 0 records lost.

    python benchmarks/reliability.py [--fuzz 10000] [--kills 20] [--seed 0] [--json out.json]
                                     [--skip fuzz,bad-inputs,faults,storage,kills]

Every part compiles into a fresh kernel cache. The exit status is 1 when a figure that must be
0 (or all) is not.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: E402

from looptune.testing import faults, soak  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("fuzz", "bad-inputs", "faults", "storage", "kills")

# runs the catalogue in its own process (a case that crashed would take only it down)
BAD_INPUTS = """
import json, sys, tempfile
sys.path.insert(0, "tests")
from test_bad_inputs import CASES, check
out = {"tried": 0, "clear": 0, "skipped": [], "unclear": []}
for case in CASES:
    needs = getattr(case, "needs", None)
    if needs in ("torch", "onnx"):
        try:
            __import__(needs)
        except ImportError:
            out["skipped"].append(case.id)
            continue
    out["tried"] += 1
    with tempfile.TemporaryDirectory(prefix="looptune-bad-input-") as d:
        try:
            check(case, d)
            out["clear"] += 1
        except Exception as e:
            out["unclear"].append(f"{case.id}: {type(e).__name__}: {e}"[:300])
print(json.dumps(out))
"""


def run_fuzz(count: int, seed: int, jobs: int) -> dict:
    p = subprocess.run([sys.executable, "-m", "looptune.testing.fuzz", "--count", str(count),
                        "--seed", str(seed), "--jobs", str(jobs)],
                       cwd=ROOT, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    m = re.fullmatch(r"fuzz: (\d+) schedules, (\d+) miscompiles, (\d+) crashes",
                     lines[-1].strip() if lines else "")
    if m is None:
        why = ("looptune.testing.fuzz does not exist yet" if "No module named" in p.stderr
               else f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}")
        return {"available": False, "why": why}
    n, mis, crash = (int(x) for x in m.groups())
    return {"available": True, "schedules": n, "miscompiles": mis, "crashes": crash,
            "summary": lines[-3:-1]}


def run_bad_inputs() -> dict:
    if not (ROOT / "tests" / "test_bad_inputs.py").exists():
        return {"available": False, "why": "tests/test_bad_inputs.py does not exist yet"}
    p = subprocess.run([sys.executable, "-c", BAD_INPUTS], cwd=ROOT, capture_output=True,
                       text=True)
    lines = p.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"available": False, "why": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    return {"available": True, **out}


def run_faults(seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="looptune-faults-") as d:
        r = faults.tune_with_faults(d, seed=seed)
    return {"injected": len(r.outcomes), "kinds": len({o.kind for o in r.outcomes}),
            "classified": r.classified, "not_measured": r.not_measured, "good": r.good,
            "unexpected": r.unexpected, "workers_started": r.workers_started,
            "workers_left": r.workers_left, "best_ok": r.best_ok, "best": r.best_msg,
            "outcomes": [o.__dict__ for o in r.outcomes]}


def run_storage() -> list:
    checks = []
    for fn in (soak.disk_full, soak.locked_database, soak.shared_database):
        with tempfile.TemporaryDirectory(prefix="looptune-storage-") as d:
            checks.append(fn(d).__dict__)
    return checks


def run_kills(kills: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="looptune-soak-") as d:
        r = soak.kill_soak(d, kills=kills, seed=seed)
    return {"kills": r.kills, "kills_while_tuning": r.kills_while_tuning, "lost": r.lost,
            "opens": r.opens, "failed_opens": r.failed_opens, "skipped": r.skipped,
            "integrity_not_ok": r.not_ok, "final_records": r.final_records,
            "trials": r.trials, "duplicates": r.duplicates, "finished": r.finished,
            "error": r.error, "seconds": round(r.secs, 1)}


def table(res: dict) -> tuple[list, bool]:
    """(rows, whether every figure that must be 0 or all is). A count below its target
    (a shorter run than the campaign's) shows as NO but does not make the run fail."""
    rows, good = [], True

    def row(figure, value, target, ok=None, count=False):
        nonlocal good
        good = good and (ok is not False or count)
        rows.append({"figure": figure, "value": value, "target": target,
                     "ok": "-" if ok is None else ("yes" if ok else "NO")})

    if "fuzz" in res:
        f = res["fuzz"]
        if f["available"]:
            row("schedules fuzzed", f"{f['schedules']:,}", ">= 10,000", f["schedules"] >= 10000,
                count=True)
            row("miscompiles / crashes", f"{f['miscompiles']} / {f['crashes']}", "0 / 0",
                f["miscompiles"] == f["crashes"] == 0)
        else:
            row("schedules fuzzed", "not run", ">= 10,000")
    if "bad_inputs" in res:
        b = res["bad_inputs"]
        if b["available"]:
            row("bad inputs tried", b["tried"], ">= 60", b["tried"] >= 60, count=True)
            row("with a clear error", b["clear"], "all", b["clear"] == b["tried"])
        else:
            row("bad inputs tried", "not run", ">= 60")
    if "faults" in res:
        f = res["faults"]
        row("kernel faults injected (kinds)", f"{f['injected']} ({f['kinds']})", ">= 6 kinds",
            f["kinds"] >= 6 and not f["not_measured"])
        row("kernel faults classified", f"{f['classified']} / {f['injected']}", "all",
            f["classified"] == f["injected"] and not f["unexpected"])
        row("best record correct, workers left", f"{'yes' if f['best_ok'] else 'no'}, "
            f"{f['workers_left']}", "yes, 0", f["best_ok"] and not f["workers_left"])
    if "storage" in res:
        s = res["storage"]
        row("storage faults handled", f"{sum(c['ok'] for c in s)} / {len(s)}", "all",
            all(c["ok"] for c in s))
    if "kills" in res:
        k = res["kills"]
        row("kills (while tuning)", f"{k['kills']} ({k['kills_while_tuning']})", "20",
            k["kills"] >= 20, count=True)
        row("records lost", k["lost"], "0", k["lost"] == 0)
        row("failed opens, bad records", f"{len(k['failed_opens'])}, "
            f"{len(k['skipped']) + len(k['integrity_not_ok'])}", "0, 0",
            not k["failed_opens"] and not k["skipped"] and not k["integrity_not_ok"])
        row("resumed run finished", f"{k['final_records']} / {k['trials']} records",
            "all", k["finished"] and not k["duplicates"])
    return rows, good


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fuzz", type=int, default=10000, help="schedules to fuzz")
    ap.add_argument("--fuzz-jobs", type=int, default=1)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", default="", help=f"comma-separated parts to leave out: {PARTS}")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(PARTS):
        ap.error(f"unknown parts {sorted(skip - set(PARTS))}; the parts are {PARTS}")

    res, secs = {}, {}
    steps = {"fuzz": lambda: run_fuzz(args.fuzz, args.seed, args.fuzz_jobs),
             "bad-inputs": run_bad_inputs, "faults": lambda: run_faults(args.seed),
             "storage": run_storage, "kills": lambda: run_kills(args.kills, args.seed)}
    for part, step in steps.items():
        if part in skip:
            continue
        _common.fresh_kernel_cache()
        t0 = time.monotonic()
        res[part.replace("-", "_")] = step()
        secs[part] = round(time.monotonic() - t0, 1)
        print(f"{part}: {secs[part]:.0f} s", flush=True)

    for key in ("fuzz", "bad_inputs"):
        if key in res and not res[key]["available"]:
            print(f"{key}: not run: {res[key]['why']}")
    for o in res.get("faults", {}).get("outcomes", []):
        print(f"  fault {o['kind']:<14} {o['error_class']}: "
              f"{(o['error_msg'] or '').splitlines()[0][:80]}")
    for c in res.get("storage", []):
        print(f"  {c['kind']}: {'ok' if c['ok'] else 'NOT OK'}: {c['detail'][:300]}")
    for u in res.get("bad_inputs", {}).get("unclear", []):
        print(f"  unclear: {u}")
    if res.get("kills", {}).get("error"):
        print(f"  kill soak: {res['kills']['error']}")

    rows, good = table(res)
    _common.print_table(f"reliability campaign ({_common.cpu_name()}, seed {args.seed})", rows,
                        [("figure", "figure"), ("value", "value"), ("target", "target"),
                         ("ok", "ok")])
    _common.write_json(args.json, {"benchmark": "reliability", "cpu": _common.cpu_name(),
                                   "args": vars(args), "seconds": secs, "rows": rows, **res})
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
