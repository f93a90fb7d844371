"""The official ``petab_sciml`` PyPI package in a throw-away environment.

Its import name is ours, so it never enters our environment: :func:`official_env` (a
session fixture, built once per test run) makes a virtual environment in a temporary
folder, installs the official distribution there, and lends it this environment's
third-party packages (torch, numpy, h5py, ...) through a ``.pth`` line, which adds the
folder to ``sys.path`` without running our editable install's hook, so ``petab_sciml``
there is the official package.  Jobs run in a subprocess (``official_side/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

OFFICIAL_REQUIREMENT = "petab-sciml==0.0.3"
JOBS_SCRIPT = Path(__file__).resolve().parent / "official_side" / "official_jobs.py"


class OfficialEnv:
    def __init__(self, python: Path, workdir: Path):
        self.python = python
        self.workdir = workdir

    def run(self, jobs: list[dict]) -> list[dict]:
        """Run jobs (see ``official_side/official_jobs.py``); one result per job."""
        spec = self.workdir / f"jobs_{os.getpid()}_{id(jobs)}.json"
        spec.write_text(json.dumps(jobs))
        out = subprocess.run([str(self.python), str(JOBS_SCRIPT), str(spec)], cwd=self.workdir,
                             capture_output=True, text=True, env=_clean_env(), timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"official jobs failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="session")
def official_env(tmp_path_factory) -> OfficialEnv:
    if sys.version_info < (3, 12):
        pytest.skip("the official petab-sciml package needs Python >= 3.12, so it cannot be "
                    "installed beside this interpreter; CI runs this test with "
                    "`make test` (its default interpreter is Python 3.12+)")
    root = tmp_path_factory.mktemp("official_env")
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True
                             ).stdout.strip()
    shared = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_borrowed_from_test_env.pth").write_text("\n".join(sorted(shared)) + "\n")
    out = subprocess.run([str(python), "-m", "pip", "install", "-q", OFFICIAL_REQUIREMENT],
                         capture_output=True, text=True, env=_clean_env(), timeout=900)
    if out.returncode != 0:
        pytest.skip(f"{OFFICIAL_REQUIREMENT} is not installable here: "
                    f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}")
    return OfficialEnv(python, root)
