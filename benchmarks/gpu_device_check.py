"""Everything looptune does on an NVIDIA GPU, in one run sized for a short loan of a GPU
machine (issue 27): the GPU tests, the CUDA kernels against torch, and two models end to
end. Writes `device_check.json` (rewritten after every stage, so a run cut short keeps what
it did), `device_check.log` and `gpu_tests.xml` into OUT, and nothing else there.

Stages, each in a child process with a time limit of its own, so that a hang or a crash in
one is recorded and the next still runs:

  info     the GPU, its driver, CUDA, torch, cuda-python, NVRTC and gcc versions
  tests    every test marked `gpu` (pytest, one JUnit result per test)
  kernels  benchmarks/gpu_kernels.py, one child per workload: the untuned (dlight default)
           kernel and the kernel tuned for --trials trials (capped at --tune-s seconds)
  models   the MLP and ResNet-18 of benchmarks/models.py compiled for the GPU untuned,
           checked against torch on the GPU, both timed (CUDA events around device arrays,
           and the call a user makes: numpy in, numpy out)

    python benchmarks/gpu_device_check.py OUT [--stages info tests kernels models]
        [--workloads ...] [--trials 64] [--tune-s 40] [--budget-s 480]

On an H100 a first batch of 32 matmul 4096 candidates took 13-19 s of search (one core of the
host) and the trials about a second each before the worker kept its inputs: 20 s of tuning
gave one trial, 60 s gave 32. Give the device call the budget plus a minute or two.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STAGES = ("info", "tests", "kernels", "models")


class Run:
    """The JSON being built and the log, both under `out`; `deadline` bounds the stages."""

    def __init__(self, out: Path, budget_s: float):
        self.out = out
        self.parts = Path(tempfile.mkdtemp(prefix="device-check-"))  # merged into the JSON
        self.t0 = time.time()
        self.deadline = self.t0 + budget_s
        self.result = {"benchmark": "gpu_device_check", "started": time.strftime("%F %T"),
                       "stages": {}}
        self.log = open(out / "device_check.log", "a", buffering=1)

    def say(self, text: str) -> None:
        line = f"[{time.time() - self.t0:6.1f}s] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")

    def left(self) -> float:
        return self.deadline - time.time()

    def save(self) -> None:
        self.result["elapsed_s"] = round(time.time() - self.t0, 1)
        path = self.out / "device_check.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        tmp.replace(path)

    def child(self, argv, timeout: float, env=None) -> dict:
        """Run argv (its output into the log); {"rc", "secs", "tail"}; rc None: killed."""
        t = time.time()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        lines = []
        try:
            out, _ = proc.communicate(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            out = (out or "") + f"\n[killed after {timeout:.0f} s]\n"
        for line in (out or "").splitlines():
            lines.append(line)
            self.log.write("    " + line + "\n")
        rc = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else None
        return {"rc": rc, "secs": round(time.time() - t, 1), "tail": "\n".join(lines[-25:])}


# ---------------------------------------------------------------------------- stages
def info(run: Run, args) -> dict:
    def cmd(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"unavailable: {e}"
    d = {"python": platform.python_version(), "host": platform.node(),
         "nvidia_smi": cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                           "clocks.max.sm,power.limit", "--format=csv,noheader"),
         "gcc": cmd("gcc", "--version").splitlines()[0] if cmd("gcc", "--version") else None,
         "nvcc": cmd("nvcc", "--version").splitlines()[-1:] or None,
         "cpu": cmd("sh", "-c", "lscpu | grep 'Model name'")}
    try:
        import torch
        d.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                 torch_gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except Exception as e:  # noqa: BLE001 - recorded
        d["torch"] = f"unavailable: {e}"
    try:
        from importlib.metadata import version
        d["cuda_bindings"] = version("cuda-bindings")
    except Exception as e:  # noqa: BLE001
        d["cuda_bindings"] = f"unavailable: {e}"
    parts = {"nvrtc": lambda: str(_looptune("runtime.cuda_compile")._nvrtc_version()),
             "cuda_include_dirs": lambda: [str(p) for p in
                                           _looptune("runtime.cuda_compile").include_dirs()],
             "cuda_driver_api": _driver_version,
             "gpu_available": lambda: _looptune("target.cuda_device").gpu_available(),
             "target": lambda: str(_looptune("target").Target.create("cuda"))}
    for key, get in parts.items():
        try:
            d[key] = get()
        except Exception as e:  # noqa: BLE001 - recorded
            d[key] = f"failed: {type(e).__name__}: {e}"
    for k, v in d.items():
        run.say(f"  {k}: {v}")
    return d


def _looptune(module: str):
    import importlib
    return importlib.import_module(f"looptune.{module}")


def _driver_version() -> str:
    drv = _looptune("cuda_bindings")._bindings("driver")
    drv.cuInit(0)
    _, v = drv.cuDriverGetVersion()
    return f"{v // 1000}.{v % 1000 // 10}"


def tests(run: Run, args) -> dict:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                   if "mark.gpu" in p.read_text())
    xml = run.out / "gpu_tests.xml"
    res = run.child([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                     "-p", "no:benchmark", "-n", "4", "-rfE", f"--junitxml={xml}", *files],
                    timeout=min(args.tests_s, run.left()))
    cases = []
    if xml.exists():
        for case in ET.parse(xml).iter("testcase"):
            status, msg = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    msg = (el.get("message") or "")[:600]
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}",
                          "status": status, "secs": float(case.get("time") or 0),
                          **({"message": msg} if msg else {})})
    counts = {s: sum(c["status"] == s for c in cases)
              for s in ("passed", "failed", "error", "skipped")}
    run.say(f"  gpu tests: {counts} (rc {res['rc']}, {res['secs']} s)")
    return {**res, "files": files, "counts": counts, "cases": cases}


def kernels(run: Run, args) -> dict:
    rows, children = [], {}
    for key in args.workloads:
        left = run.left() - args.reserve_s
        if left < 20:
            children[key] = {"skipped": f"out of time ({run.left():.0f} s left)"}
            continue
        js = run.parts / f"kernel_{key}.json"
        res = run.child([sys.executable, str(HERE / "gpu_kernels.py"), "--workloads", key,
                         "--trials", str(args.trials), "--per-iter", str(args.per_iter),
                         "--max-time-s", str(args.tune_s), "--json", str(js)],
                        timeout=min(args.tune_s + 60, left))
        children[key] = res
        if js.exists():
            rows += json.loads(js.read_text())["rows"]
        else:
            rows.append({"workload": key, "note": f"no result (rc {res['rc']}): "
                         + res["tail"][-300:]})
        run.say(f"  {key}: rc {res['rc']} in {res['secs']} s")
        for r in rows:
            if r.get("workload") == key:
                run.say("    " + _row_text(r))
        run.result["stages"]["kernels"] = {"rows": rows, "children": children}
        run.save()
    return {"rows": rows, "children": children}


def _row_text(r: dict) -> str:
    if "looptune_ms" not in r:
        return f"{r.get('variant', '?')}: {r.get('note', '')}"
    return (f"{r['variant']}: {r['looptune_ms']:.4f} ms vs torch {r['torch_ms']:.4f} ms "
            f"= {r['vs_torch']:.3f}x, {r['gflops']:.0f} GFLOP/s, {r['check']}"
            + (f", {r['trials']} trials in {r['tuning_wall_s']:.0f} s" if r.get("trials") else ""))


def models(run: Run, args) -> dict:
    out = {}
    for name in args.models:
        left = run.left() - 5
        if left < 15:
            out[name] = {"skipped": f"out of time ({run.left():.0f} s left)"}
            continue
        js = run.parts / f"model_{name}.json"
        res = run.child([sys.executable, str(Path(__file__).resolve()), str(run.out),
                         "--one-model", name, "--json-out", str(js)], timeout=min(120, left))
        out[name] = {**(json.loads(js.read_text()) if js.exists() else {}), "child": res}
        run.say(f"  {name}: {json.dumps({k: v for k, v in out[name].items() if k != 'child'})}"
                f" (rc {res['rc']}, {res['secs']} s)")
    return out


def one_model(name: str, path: Path) -> None:
    """Compile model `name` untuned for the GPU, check it against torch on the GPU, time both;
    the dict goes to `path` as it grows (a crash leaves what was learnt)."""
    sys.path.insert(0, str(HERE))
    import models as mb  # noqa: E402 - benchmarks/models.py
    import numpy as np
    import torch
    import looptune

    d = {"model": name}

    def save():
        path.write_text(json.dumps(d, indent=1, default=str))

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, inputs = mb.make(name)
    arrays = [x.numpy() for x in inputs]
    graph = looptune.from_torch(model, inputs)
    t0 = time.time()
    compiled = looptune.compile_model(graph, None, "cuda")
    d.update(compile_s=round(time.time() - t0, 2), kernels=compiled.desc["kernels"])
    save()
    gpu_model = model.cuda()
    gpu_in = [x.cuda() for x in inputs]
    with torch.no_grad():
        want = gpu_model(*gpu_in).float().cpu().numpy()
    got = compiled(*arrays)
    err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
    d.update(rel_error=err, max_abs_diff=float(np.abs(got - want).max()),
             correct=bool(np.isfinite(got).all() and err < 1e-4))
    save()

    def events(fn, n=20):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(n):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return float(np.median(times))

    def wall(fn, n=20):
        fn()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return float(np.median(times))

    with torch.no_grad():
        d["torch_device_ms"] = events(lambda: gpu_model(*gpu_in))
        d["torch_numpy_ms"] = wall(lambda: gpu_model(*[torch.from_numpy(a).cuda() for a in arrays])
                                   .cpu().numpy())
    compiled(*arrays)  # the inputs on the device: _run times the kernels alone
    d["looptune_device_ms"] = events(lambda: compiled._run())
    d["looptune_numpy_ms"] = wall(lambda: compiled(*arrays))
    d["vs_torch_device"] = d["torch_device_ms"] / d["looptune_device_ms"]
    d["vs_torch_numpy"] = d["torch_numpy_ms"] / d["looptune_numpy_ms"]
    prof = compiled.profile(*arrays, repeat=5)
    d["slowest_kernels"] = sorted(prof, key=lambda r: -r["ms"])[:6]
    save()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for device_check.json, the log and the parts")
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--workloads", nargs="+", default=None,
                    help="gpu_kernels.py workloads (default: all)")
    ap.add_argument("--models", nargs="+", default=["mlp", "resnet18"])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--per-iter", type=int, default=32)
    ap.add_argument("--tune-s", type=float, default=40.0,
                    help="wall-clock cap of each workload's tuning")
    ap.add_argument("--tests-s", type=float, default=120.0)
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="the whole run; stages that would pass it are skipped")
    ap.add_argument("--reserve-s", type=float, default=60.0,
                    help="kept for the models when the kernels run long")
    ap.add_argument("--one-model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one_model:
        return one_model(args.one_model, Path(args.json_out))
    if args.workloads is None:
        sys.path.insert(0, str(HERE))
        from gpu_kernels import WORKLOADS
        args.workloads = list(WORKLOADS)
    if "models" not in args.stages:
        args.reserve_s = 0.0
    run = Run(out, args.budget_s)
    for stage in args.stages:
        run.say(f"== {stage} ({run.left():.0f} s left)")
        try:
            run.result["stages"][stage] = globals()[stage](run, args)
        except Exception as e:  # noqa: BLE001 - recorded, and the next stage runs
            import traceback
            run.result["stages"][stage] = {"error": f"{type(e).__name__}: {e}",
                                           "traceback": traceback.format_exc()[-2000:]}
            run.say(f"  {stage} failed: {type(e).__name__}: {e}")
        run.save()
    run.say(f"done in {time.time() - run.t0:.0f} s; {out / 'device_check.json'}")


if __name__ == "__main__":
    main()
