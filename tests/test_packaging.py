"""The package builds as an sdist and a wheel that `twine check` accepts and that hold what an
install needs: the rule pages `--explain` and SARIF read, py.typed, the command and the flake8
entry point, and the `[project.urls]` the rule links come from."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from zerograd.analysis.rules import RULES
from zerograd.version import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    # No isolation: the build backend is the environment's setuptools (a test extra), so the
    # test needs no download.
    # The wheel is built from the sdist, which so proves complete, and no build/ folder is left here.
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation",
                            "--outdir", str(tmp_path), str(ROOT)], capture_output=True, timeout=300)
    assert built.returncode == 0, built.stderr.decode()[-2000:]
    wheel = tmp_path / f"zerograd-{__version__}-py3-none-any.whl"
    sdist = tmp_path / f"zerograd-{__version__}.tar.gz"
    assert wheel.is_file() and sdist.is_file()
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                             capture_output=True, timeout=120)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"zerograd-{__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {f"zerograd/ruledocs/{code}.md" for code in RULES} <= names
    assert "zerograd/py.typed" in names and "zerograd/cli.py" in names
    assert not any(name.startswith(("tests/", "fixtures/", "benchmarks/")) for name in names)
    assert "zerograd = zerograd.cli:main" in entry_points and "ZG = zerograd.flake8_plugin:ZeroGradPlugin" in entry_points
    assert "Project-URL: Repository, https://github.com/" in metadata
    assert "Provides-Extra: server" in metadata
    with tarfile.open(sdist) as archive:
        members = set(archive.getnames())
    assert f"zerograd-{__version__}/src/zerograd/ruledocs/ZG001.md" in members
    assert f"zerograd-{__version__}/README.md" in members
