"""Every public class says what it is for, and every public method of an extension point
(the interfaces a user implements: rules, mutators, strategies, ...) states its contract."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "looptune"

# (file under looptune/, class): the interfaces users subclass or call into, whose public
# methods all need a docstring saying what they receive, return and must guarantee
EXTENSION_POINTS = [
    ("tune/schedule_rule/base.py", "ScheduleRule"),
    ("tune/mutator/base.py", "Mutator"),
    ("tune/postproc/base.py", "Postproc"),
    ("tune/space_generator/base.py", "SpaceGenerator"),
    ("tune/search_strategy/base.py", "SearchStrategy"),
    ("tune/cost_model/base.py", "CostModel"),
    ("tune/database/base.py", "Database"),
    ("tune/runner/base.py", "Runner"),
    ("tune/builder/base.py", "Builder"),
    ("tune/task_scheduler/base.py", "TaskScheduler"),
    ("tune/feature/base.py", "FeatureExtractor"),
    ("template/tuner/base.py", "Tuner"),
    ("backend/base.py", "Backend"),
    ("dlight/base.py", "Rule"),
    ("graph/op/base.py", "GraphOp"),
]
# single methods the user calls first, named by the issue
ENTRY_POINTS = [("tune/task.py", "Task", "tune")]


def _public(name: str) -> bool:
    return not name.startswith("_")


def _tree(rel: str) -> ast.Module:
    return ast.parse((PACKAGE / rel).read_text(), filename=rel)


def _class(rel: str, name: str) -> ast.ClassDef:
    found = [n for n in ast.walk(_tree(rel)) if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"class {name} is no longer in looptune/{rel}; update EXTENSION_POINTS"
    return found[0]


def _methods(cls: ast.ClassDef) -> list:
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_every_public_class_has_a_docstring():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.ClassDef) and _public(node.name) \
                    and ast.get_docstring(node) is None:
                missing.append(f"{rel}:{node.lineno} class {node.name}")
    assert not missing, (f"{len(missing)} public classes have no docstring; say in one to four "
                         "lines what each is for (STYLE.md):\n" + "\n".join(missing))


def test_extension_point_methods_have_docstrings():
    missing = []
    for rel, name in EXTENSION_POINTS:
        cls = _class(rel, name)
        missing += [f"looptune/{rel}:{f.lineno} {name}.{f.name}" for f in _methods(cls)
                    if _public(f.name) and ast.get_docstring(f) is None]
    for rel, name, method in ENTRY_POINTS:
        found = [f for f in _methods(_class(rel, name)) if f.name == method]
        assert found, f"{name}.{method} is no longer in looptune/{rel}; update ENTRY_POINTS"
        if ast.get_docstring(found[0]) is None:
            missing.append(f"looptune/{rel}:{found[0].lineno} {name}.{method}")
    assert not missing, ("public methods of extension points without a docstring (say what "
                         "they receive, return and guarantee):\n" + "\n".join(missing))

