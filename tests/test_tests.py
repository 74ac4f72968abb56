"""The tests can fail: none skips (or xfails) inside an `except` handler around the code under
test, only before the test body, for a missing optional dependency or device. A skip in an
`except ImportError` / `except ModuleNotFoundError` handler is the one exception. Nor does
one skip because a feature of looptune "is not there yet": a feature that exists is tested."""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ALLOWED = {"ImportError", "ModuleNotFoundError"}  # a missing optional dependency
SKIPS = {"skip", "xfail"}


def _pytest_names(tree: ast.Module) -> set[str]:
    """Local names bound to pytest.skip / pytest.xfail (`from pytest import skip as s`)."""
    return {a.asname or a.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "pytest"
            for a in node.names if a.name in SKIPS}


def _is_skip(call: ast.Call, local: set[str]) -> bool:
    """pytest.skip(...), pytest.xfail(...), their `.Exception(...)`, or an imported alias."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "Exception":
        f = f.value
    if isinstance(f, ast.Name):
        return f.id in local
    return (isinstance(f, ast.Attribute) and f.attr in SKIPS
            and isinstance(f.value, ast.Name) and f.value.id == "pytest")


def _caught(handler: ast.ExceptHandler) -> set[str]:
    """The names of the exception types a handler catches (`except:` catches everything)."""
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {ast.unparse(t).rsplit(".", 1)[-1] for t in types}


def skips_in_except_handlers(source: str, filename: str = "<test>") -> list[str]:
    """`file:line` of every skip/xfail inside an `except` handler that catches anything
    other than ImportError / ModuleNotFoundError."""
    tree = ast.parse(source, filename)
    local = _pytest_names(tree)
    found = set()
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or _caught(handler) <= ALLOWED:
            continue
        for stmt in handler.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and _is_skip(node, local):
                    caught = f" {ast.unparse(handler.type)}" if handler.type else ""
                    found.add((node.lineno, f"{filename}:{node.lineno}: skips in "
                               f"`except{caught}`"))
    return [msg for _, msg in sorted(found)]


NOT_YET = re.compile(r"\byet\b|not implemented|\btodo\b", re.IGNORECASE)


def _reason(call: ast.Call) -> str:
    """The literal text of a skip's reason (the constant parts of an f-string)."""
    args = list(call.args) + [k.value for k in call.keywords if k.arg in ("reason", "msg")]
    return " ".join(n.value for a in args for n in ast.walk(a)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str))


def skips_for_missing_features(source: str, filename: str = "<test>") -> list[str]:
    """`file:line` of every skip, xfail or skip/skipif/xfail mark whose reason says that
    something is not there yet."""
    tree = ast.parse(source, filename)
    local = _pytest_names(tree)
    out = []
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)),
                       key=lambda n: n.lineno):
        f = node.func
        mark = (isinstance(f, ast.Attribute) and f.attr in ("skip", "skipif", "xfail")
                and ast.unparse(f.value) == "pytest.mark")
        if (mark or _is_skip(node, local)) and NOT_YET.search(_reason(node)):
            out.append(f"{filename}:{node.lineno}: {_reason(node)!r}")
    return out


def _test_files():
    for path in sorted(TESTS.rglob("*.py")):
        yield str(path.relative_to(TESTS.parent)), path.read_text()


def test_no_test_skips_inside_an_except_handler():
    offenders = [o for rel, text in _test_files() for o in skips_in_except_handlers(text, rel)]
    assert not offenders, ("a skip inside an `except` hides the failure of the code under "
                           "test; check for the dependency or device before the test body:\n"
                           + "\n".join(offenders))


def test_the_guard_finds_the_skips_it_is_for():
    src = '''
import pytest
from pytest import xfail as xf

def test_a():
    try:
        build()
    except (NotImplementedError, BuildError) as e:
        pytest.skip(f"not there yet: {e}")

def test_b():
    try:
        import torch
    except ImportError:
        pytest.skip("no torch")
    try:
        run()
    except:
        if True:
            xf("anything")
    try:
        import x
    except (ImportError, ValueError):
        raise pytest.skip.Exception("no x")
'''
    assert skips_in_except_handlers(src, "t.py") == [
        "t.py:9: skips in `except (NotImplementedError, BuildError)`",
        "t.py:20: skips in `except`",
        "t.py:24: skips in `except (ImportError, ValueError)`"]


def test_no_test_skips_a_feature_that_is_not_there_yet():
    offenders = [o for rel, text in _test_files() for o in skips_for_missing_features(text, rel)]
    assert not offenders, ("test what exists, and mark a known bug xfail(strict=True) naming "
                           "it:\n" + "\n".join(offenders))


def test_the_feature_guard_finds_what_it_is_for():
    src = '''
import pytest

@pytest.mark.skipif(True, reason="tiling is not there yet")
def test_a(sch):
    if sch is None:
        pytest.skip(f"GPU lowering is not there yet: {sch}")
    pytest.importorskip("torch")
    if not have_nvrtc():
        pytest.skip("NVRTC is not installed")
'''
    assert skips_for_missing_features(src, "t.py") == [
        "t.py:4: 'tiling is not there yet'", "t.py:7: 'GPU lowering is not there yet: '"]


def test_a_test_session_removes_its_kernel_cache(tmp_path):
    """Every session compiles into a cache of its own (0.3-0.6 GB for the suite); 851 of them
    had piled up in one machine's temp folder before the session removed its own."""
    import os
    import subprocess
    import sys
    (tmp_path / "test_one.py").write_text(
        "import os\n\ndef test_cache():\n"
        "    d = os.environ['LOOPTUNE_CACHE_DIR']\n"
        "    assert os.path.isdir(d)\n"
        "    open(os.path.join(d, 'kernel.so'), 'w').write('x')\n")
    (tmp_path / "conftest.py").write_text(  # the suite's session hooks
        "import importlib.util\n"
        f"s = importlib.util.spec_from_file_location('suite', {str(TESTS / 'conftest.py')!r})\n"
        "m = importlib.util.module_from_spec(s)\ns.loader.exec_module(m)\n"
        "pytest_configure = m.pytest_configure\n"
        "pytest_unconfigure = getattr(m, 'pytest_unconfigure', lambda config: None)\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LOOPTUNE_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_one.py")], cwd=tmp_path, capture_output=True,
                          text=True, env={**env, "TMPDIR": str(temp)}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(temp.glob("looptune-test-cache-*"))
