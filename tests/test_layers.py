"""Nothing outside looptune/schedule/ touches a Schedule's private state: its State (the
function and the index of loops and blocks), its handle table, its instruction plumbing, or
private helpers of the schedule package. Callers (the rest of looptune, benchmarks/,
examples/) use Schedule's public methods instead (block_names, enclosing_loops, realize,
checkpoint / rewind, apply_instruction, ...). Tests may, sparingly."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "looptune"

# Schedule's private members (schedule.py)
PRIVATE = {"_rv", "_apply", "_block", "_loop", "_new", "_int", "_loop_or_block"}
# what State holds: `x.state.<one of these>` is a schedule's state whatever `x` is called
STATE_MEMBERS = {"func", "index", "loop", "block", "loops_of", "scope_block_of", "replace",
                 "set_func", "_index"}


def _last_name(node) -> str:
    """The identifier an expression ends in: `sch` for sch, cand.sch, self.sch; '' else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_schedule_state(node: ast.Attribute, parent) -> bool:
    if node.attr != "state":
        return False
    if "sch" in _last_name(node.value).lower():  # sch.state, cand.sch.state, schedule.state
        return True
    return isinstance(parent, ast.Attribute) and parent.attr in STATE_MEMBERS


def _schedule_module(node: ast.ImportFrom, path: Path) -> str | None:
    """The dotted name of a looptune.schedule module an import reads from, or None."""
    if node.level == 0:
        mod = node.module or ""
    else:
        pkg = path.relative_to(ROOT).with_suffix("").parts[:-1]
        if node.level - 1 > len(pkg):
            return None
        base = pkg[:len(pkg) - (node.level - 1)]
        mod = ".".join(base + ((node.module,) if node.module else ()))
    return mod if mod == "looptune.schedule" or mod.startswith("looptune.schedule.") else None


def violations(path: Path, source: str | None = None) -> list[str]:
    """`file:line: what` for every reach into a schedule's internals in one module."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    out = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in PRIVATE:
                out.append(f"{rel}:{node.lineno}: .{node.attr} (a Schedule's private member)")
            elif _is_schedule_state(node, parents.get(node)):
                out.append(f"{rel}:{node.lineno}: .state (a Schedule's private State)")
        elif isinstance(node, ast.ImportFrom):
            mod = _schedule_module(node, path)
            if mod is None:
                continue
            if mod == "looptune.schedule.state":
                out.append(f"{rel}:{node.lineno}: imports looptune.schedule.state")
            for alias in node.names:
                if alias.name == "state" and mod == "looptune.schedule":
                    out.append(f"{rel}:{node.lineno}: imports looptune.schedule.state")
                elif alias.name.startswith("_"):
                    out.append(f"{rel}:{node.lineno}: imports {alias.name} (private) from {mod}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "looptune.schedule.state":
                    out.append(f"{rel}:{node.lineno}: imports looptune.schedule.state")
    return out


def test_nothing_outside_schedule_touches_its_private_state():
    found = []
    paths = [p for d in (PACKAGE, ROOT / "benchmarks", ROOT / "examples") for p in d.rglob("*.py")]
    for path in sorted(paths):
        if (PACKAGE / "schedule") in path.parents:
            continue
        found += violations(path)
    found.sort(key=lambda v: (v.split(":")[0], int(v.split(":")[1])))
    assert not found, "use Schedule's public methods instead:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_reach():
    src = "\n".join([
        "from ...schedule.state import collect_realizes",     # 1: the State module
        "from ...schedule.trace import _map_rv",             # 2: a private helper
        "import looptune.schedule.state",                    # 3
        "sch._apply('Split', [], [])",                       # 4
        "x = sch._rv.get(rv)",                               # 5
        "names = sch.state.index.blocks",                    # 6
        "loops = cand.sch.state.loops_of('C')",              # 7
        "loops = fresh.state.loops_of('C')",                 # 8
        "super()._apply(kind, inputs, attrs)",               # 9
        "gen.bit_generator.state = 3",                       # fine: not a schedule
        "from ...schedule import Schedule",                  # fine
        "sch.get(rv); sch.enclosing_loops(b)",               # fine
    ])
    path = PACKAGE / "tune" / "postproc" / "example.py"
    lines = sorted({int(v.split(":")[1]) for v in violations(path, src)})
    assert lines == [1, 2, 3, 4, 5, 6, 7, 8, 9]


# ------------------------------------------------------------------------------ the layers
def _lint_imports(root: Path) -> tuple[int, str]:
    """import-linter's verdict on the contracts in pyproject.toml, for the package at `root`."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                          "lint_imports; sys.exit(lint_imports(no_cache=True))"],
                         cwd=root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    return out.returncode, out.stdout + out.stderr


def test_packages_import_only_from_the_layers_below():
    """pyproject.toml's import-linter contracts: the layers of docs/ARCHITECTURE.md, and no
    cycle between top-level packages."""
    rc, out = _lint_imports(ROOT)
    assert rc == 0, out
    assert "2 kept, 0 broken" in out


# imports that once ran back up the layers; each must break the contract if it came back
BACK_UP = [("schedule/schedule.py", "from ..codegen import lower_loops"),
           ("tir/interpreter_gpu.py", "from ..codegen import gpu"),
           ("target/target.py", "from ..runtime import cuda"),
           ("runtime/cuda.py", "from ..codegen.cuda import launch_table"),
           ("codegen/cstyle.py", "from ..runtime.error import BuildError")]


def test_an_import_back_up_the_layers_breaks_the_contract(tmp_path):
    import shutil
    shutil.copytree(PACKAGE, tmp_path / "looptune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for rel, line in BACK_UP:
        path = tmp_path / "looptune" / rel
        path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    rc, out = _lint_imports(tmp_path)
    assert rc != 0
    for rel, _ in BACK_UP:
        importer = "looptune." + rel.removesuffix(".py").replace("/", ".")
        assert importer in out, (importer, out)
