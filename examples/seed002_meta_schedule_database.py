"""The "MetaSchedule: Search-Based Auto-Tuning" deep dive, on looptune: the demo model's
tunable tasks, selective tuning (op_names), the JSON database of a work dir, and a local
database layered over a shared one (OrderedUnionDatabase) to compile the model.

The deep dive builds its model with Relax (`relax.frontend.nn`) and tunes it through Relax
passes; looptune imports models from PyTorch (or ONNX), so the same model is a torch module
here, and the passes are looptune's model calls (docs/tvm_names.md has the mapping):

    relax.transform.MetaScheduleTuneIRMod(op_names=)   looptune.tune_model(op_names=)
    relax.transform.MetaScheduleApplyDatabase()        looptune.compile_model(database=)
    meta_schedule.relax_integration.extract_tasks      looptune.extract_tasks

    python examples/seed002_meta_schedule_database.py            # 300 trials
    python examples/seed002_meta_schedule_database.py --small    # a few trials (CI)
"""
import argparse
import tempfile

import numpy as np
import torch
import looptune as tvm
from looptune import meta_schedule as ms


class DemoModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(256, 10, bias=False)

    def forward(self, x):
        x = self.fc1(x)
        x = self.relu(x)
        x = self.fc2(x)
        return x


def main(trials=300, per_iter=64, local_dir=None, shared_dir=None):
    """Returns (the compiled model's output, torch's) on a random input."""
    input_shape = (1, 784)
    model = DemoModel().eval()
    mod = tvm.from_torch(model, torch.randn(*input_shape))
    target = tvm.target.Target("llvm")

    tasks = tvm.extract_tasks(mod, target)
    for i, task in enumerate(tasks):
        print(f"Task {i}: {task.task_name}  (weight={task.weight})")

    local_dir = local_dir or tempfile.mkdtemp(prefix="seed002-local-")
    shared_dir = shared_dir or tempfile.mkdtemp(prefix="seed002-shared-")
    # selective tuning: only the tasks whose names contain "matmul"
    tvm.tune_model(mod, target, work_dir=local_dir, max_trials_global=trials,
                   num_trials_per_iter=per_iter, op_names=["matmul"],
                   database=ms.database.JSONDatabase(work_dir=local_dir))

    local_db = ms.database.JSONDatabase(work_dir=local_dir)
    shared_db = ms.database.JSONDatabase(work_dir=shared_dir)
    combined_db = ms.database.OrderedUnionDatabase(local_db, shared_db)
    print(f"Database has {len(local_db.get_all_tuning_records())} tuning records")

    compiled = tvm.compile_model(mod, combined_db, target)
    x = np.random.randn(*input_shape).astype("float32")
    got = compiled(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    return np.asarray(got), want


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="a few trials")
    opts = ap.parse_args()
    got, want = main(4, 2) if opts.small else main()
    print("max error vs torch:", float(np.abs(got - want).max()))
