"""The `looptune` command."""
from __future__ import annotations

import argparse
import sys
import warnings

from ..error import BuildError
from ..target import TargetError
from ..text import EscapingWriter
from ..tune.error import TuneError
from .tune import CLIError

EXAMPLES = """examples:
  looptune tune matmul --shape M=1024,N=1024,K=1024 --trials 256
  looptune tune conv2d --time 120 --work-dir conv-work
  looptune tune matmul --cluster HEAD:6379
  looptune tune my_ops.py:gemm --args 512 512 512 --trials 64
  looptune db list
  looptune tune matmul --database postgresql://me:pw@dbhost:5432/looptune
  looptune db push --database postgresql://me:pw@dbhost:5432/looptune
  looptune db stats --database postgresql://me:pw@dbhost:5432/looptune --json
  looptune db best matmul
  looptune report looptune-work --html report.html
  looptune tune-model model.onnx --trials 512 --work-dir resnet-work
  looptune run model.onnx --work-dir resnet-work
  looptune inspect model.onnx
"""


TUNE_DATABASE = ("a database URL: postgresql://user:password@host:5432/dbname (records go to "
                 "the work dir first, then to the server; if it goes away, tuning goes on "
                 "locally and syncs when it is back), or sqlite:///path (instead of the work dir)")
READ_DATABASE = ("a database URL: postgresql://user:password@host:5432/dbname (read after the "
                 "work dir's database, if it holds one), or sqlite:///path (instead of it)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="looptune", description="Search-based auto-tuning of "
                                "tensor programs.", epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tune", help="tune a workload end to end",
                       description="Tune a built-in operator (see `looptune ops`) or a "
                       "@register_workload function in a Python file, keep every measurement in "
                       "the work dir's database (resuming from it), and report the best kernel.")
    t.add_argument("workload", help="an operator name, or FILE.py[:FUNCTION]")
    t.add_argument("--shape", help="parameters, e.g. M=1024,N=1024,K=1024")
    t.add_argument("--args", nargs="*", type=int, help="positional int arguments of a file's "
                   "workload function")
    t.add_argument("--trials", type=int, default=64, help="measurement budget (default 64)")
    t.add_argument("--time", type=float, default=None, help="wall-clock budget in seconds")
    t.add_argument("--work-dir", default="looptune-work", help="where the database and the "
                   "best kernel's C go (default ./looptune-work)")
    t.add_argument("--database", metavar="URL", help=TUNE_DATABASE)
    t.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    t.add_argument("--per-iter", type=int, default=16, help="candidates per batch (default 16)")
    t.add_argument("--threads", type=int, default=None, help="threads for the kernels "
                   "(default: all cores)")
    t.add_argument("--target", default="cpu", help="target (default: this CPU)")
    t.add_argument("--strategy", default="evolutionary", choices=["evolutionary", "replay-trace"],
                   help="search strategy (default evolutionary: mutation guided by a cost "
                   "model; replay-trace: random sampling)")
    t.add_argument("--cost-model", default="xgb", choices=["xgb", "mlp", "random"],
                   help="cost model of the evolutionary search (default xgb)")
    t.add_argument("--no-check", action="store_true", help="skip checking candidates against "
                   "the unscheduled program")
    t.add_argument("--quiet", action="store_true", help="no progress line")
    add_cluster(t)
    d = sub.add_parser("db", help="inspect a tuning database, or sync one with a server",
                       description="list, show, best: look inside the work dir's database "
                       "(and the --database server's records). stats: count the records of "
                       "one database (--database, else the work dir's) per workload and per "
                       "measuring machine. push / pull: send the work dir's records the server "
                       "lacks / copy the server's records the work dir lacks (both idempotent).")
    d.add_argument("db_cmd", choices=["list", "show", "best", "stats", "push", "pull"])
    d.add_argument("workload", nargs="?", help="workload name or key prefix (show, best)")
    d.add_argument("--work-dir", default="looptune-work")
    d.add_argument("--database", metavar="URL", help=READ_DATABASE)
    d.add_argument("--json", action="store_true", help="stats as JSON: "
                   '{"records": N, "workloads": M, "fingerprints": {id: count}}')
    d.add_argument("--limit", type=int, default=20, help="records to show (default 20)")
    sub.add_parser("ops", help="list the built-in operators and their default shapes")
    rp = sub.add_parser("report", help="report on a tuning database: curves, latencies, "
                        "trials to 90/95/99%% of the best, the best schedules",
                        description="For every task in a work dir's database: best-so-far "
                        "curves against trials and wall time (one line per run or strategy), "
                        "a histogram of measured latencies, trials to 90/95/99% of the best "
                        "and the best schedule as code. Prints a summary; --png and --html "
                        "need matplotlib (pip install 'looptune[plot]').")
    rp.add_argument("work_dir", nargs="*", help="work dirs (or SQLite database files): "
                    "their records are reported together")
    rp.add_argument("--database", metavar="URL", help="a database URL whose records are "
                    "reported too (postgresql://..., sqlite:///path)")
    rp.add_argument("--html", help="write a self-contained HTML page here")
    rp.add_argument("--png", help="write every task's figures into one PNG here")
    rp.add_argument("--by", default="auto", choices=["auto", "run", "strategy"],
                    help="one line per run, or per strategy (the median over its runs); "
                    "auto: per strategy past 8 runs (default)")
    m = sub.add_parser("tune-model", help="tune every task of a model (ONNX or torch.export)",
                       description="Import a model (ONNX, or a .pt2 from "
                       "torch.export.save), fuse it, tune its distinct tasks under one "
                       "budget (weighted by how often each runs), and compare the model end "
                       "to end with its untuned build.")
    m.add_argument("model", help="an .onnx file (static input shapes) or a .pt2 "
                   "file (torch.export.save)")
    m.add_argument("--trials", type=int, default=256, help="budget over all tasks (default 256)")
    m.add_argument("--work-dir", default="looptune-work")
    m.add_argument("--database", metavar="URL", help=TUNE_DATABASE)
    m.add_argument("--op-names", nargs="*", default=None, help="tune only the tasks whose "
                   "names contain one of these")
    m.add_argument("--per-iter", type=int, default=16, help="candidates per batch (default 16)")
    m.add_argument("--threads", type=int, default=1, help="threads per kernel (default 1)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--target", default="cpu")
    m.add_argument("--quiet", action="store_true", help="no progress lines")
    add_precision(m)
    add_cluster(m)
    i = sub.add_parser("inspect", help="show a model's operators, what imports, and its tasks",
                       description="Without compiling: count a model's operators, say which "
                       "ones looptune's importer cannot translate (all of them at once), and "
                       "list the fused kernels' distinct tasks with their weights and work.")
    i.add_argument("model", help="an .onnx file, or a .pt2 file from torch.export.save")
    r = sub.add_parser("run", help="compile a model with its tuning records and time it")
    r.add_argument("model", help="an .onnx file (static input shapes) or a .pt2 "
                   "file (torch.export.save)")
    r.add_argument("--work-dir", default=None, help="the work dir whose records to use (it "
                   "must hold a database; default: ./looptune-work if it holds one, else "
                   "every kernel runs its default schedule)")
    r.add_argument("--database", metavar="URL", help=READ_DATABASE)
    r.add_argument("--threads", type=int, default=1, help="threads per kernel (default 1)")
    r.add_argument("--target", default="cpu")
    add_precision(r)
    return p


def add_precision(p) -> None:
    p.add_argument("--precision", choices=["float32", "bf16", "int8", "int8-dynamic"],
                   default="float32",
                   help="bf16: matmuls with constant weights in bfloat16, summed in float32, on "
                   "the CPU's AMX / AVX512-BF16 units where it has them; int8: matmuls and "
                   "convolutions with constant weights in int8 (per-channel weights, "
                   "activation ranges calibrated on --calibration), on its VNNI / AMX units; "
                   "int8-dynamic: matmuls in int8 with each call's activation range, no "
                   "calibration needed (transformers) (default float32)")
    p.add_argument("--calibration", metavar="NPZ", default=None,
                   help="inputs to calibrate int8 on and to report a lower precision's error "
                   "on: an .npz with one array per model input, by name, examples stacked "
                   "along a first axis")


def add_cluster(p) -> None:
    p.add_argument("--cluster", metavar="ADDRESS", default=None, help="build and measure on "
                   "a Ray cluster: its head's HOST:PORT, or 'local' to start a Ray runtime "
                   "here (nodes offer devices with --resources '{\"looptune_device\": 1}'; "
                   "needs pip install 'looptune[cluster]')")


def dispatch(args) -> int:
    """Run the command `args` (parsed by parser()); a user error raises, for main to print."""
    if args.cmd == "tune":
        from .tune import run
        return run(args)
    if args.cmd == "db":
        if args.db_cmd in ("show", "best") and not args.workload:
            raise CLIError(f"`looptune db {args.db_cmd}` needs a workload name or key prefix")
        from .db import run
        return run(args)
    if args.cmd == "tune-model":
        from .model import tune_model_cmd
        return tune_model_cmd(args)
    if args.cmd == "run":
        from .model import run_cmd
        return run_cmd(args)
    if args.cmd == "inspect":
        from .inspect import run as inspect
        return inspect(args)
    if args.cmd == "report":
        from .report import run as report
        return report(args)
    if args.cmd == "ops":
        from ..te.ops import OPS
        for name, op in sorted(OPS.items()):
            shape = ", ".join(f"{k}={v}" for k, v in op.defaults.items())
            print(f"{name:<18}{shape}\n{'':<18}{op.doc}")
    return 0


def _print_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    # names from databases and model files are someone else's text: whatever the command
    # prints (records, errors, warnings), a control character in it is shown escaped
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingWriter(out), EscapingWriter(err)
    try:
        with warnings.catch_warnings():  # one line each, without Python's file and line
            warnings.simplefilter("default")  # a repeated warning once
            warnings.showwarning = _print_warning
            return dispatch(args)
    except (CLIError, TuneError, TargetError, BuildError) as e:  # the user can fix these
        print(f"looptune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nlooptune: interrupted; everything measured so far is in the database",
              file=sys.stderr)
        return 130
    finally:
        sys.stdout, sys.stderr = out, err


if __name__ == "__main__":
    sys.exit(main())
