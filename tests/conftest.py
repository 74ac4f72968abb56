"""Test tiers: pure Python (no marker), `cc` (needs a C compiler), `gpu` (needs an NVIDIA
GPU), `browser` (needs a headless Chromium); `slow` tests are skipped when CI=true. Kernels
compiled by tests go to a per-session cache directory, removed when the session ends, unless
LOOPTUNE_CACHE_DIR is set."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _have_cc() -> bool:
    from looptune.runtime import have_compiler
    return have_compiler()


def _have_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def chromium() -> str | None:
    """The Chromium executable, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


_OWN_CACHE = []  # the kernel cache this process made for the session (removed at its end)


def pytest_configure(config):
    if "LOOPTUNE_CACHE_DIR" not in os.environ:  # xdist's workers inherit the controller's
        import tempfile
        os.environ["LOOPTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="looptune-test-cache-")
        _OWN_CACHE.append(os.environ["LOOPTUNE_CACHE_DIR"])


def pytest_unconfigure(config):
    # a session's kernels (0.3-0.6 GB) were left behind in the temp folder by every run
    for d in _OWN_CACHE:
        shutil.rmtree(d, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    have_cc = _have_cc()
    have_gpu = _have_gpu()
    have_browser = chromium() is not None
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    for item in items:
        if "cc" in item.keywords and not have_cc:
            item.add_marker(pytest.mark.skip(reason="no C compiler (set CC)"))
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU"))
        if "browser" in item.keywords and not have_browser:
            item.add_marker(pytest.mark.skip(reason="no chromium (apt-get install chromium)"))
        if "slow" in item.keywords and in_ci:
            item.add_marker(pytest.mark.skip(reason="slow; skipped in CI (run locally)"))


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def postgres():
    """A throw-away PostgreSQL cluster of this test process (tests/pg_server.py; each xdist
    worker starts its own), stopped and removed after the session."""
    import pg_server
    if pg_server.bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb / pg_ctl): apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install '.[cluster]'")
    server = pg_server.PgServer()
    yield server
    server.close()


@pytest.fixture
def pg_url(postgres):
    """The URL of a new, empty database on the test cluster, as its (password) user."""
    postgres.start()  # a test may have stopped it
    return postgres.url(postgres.create_database())
