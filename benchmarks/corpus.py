"""Pinned real packages for the benchmarks: download once into a cache outside the repo.

The lock file beside this script records name, version, file name and sha256 of each
distribution; a download whose hash differs is refused. `pip download --no-deps` fetches them from
whatever index pip is configured with.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("ZEROGRAD_CACHE", Path.home() / ".cache" / "zerograd"))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_lock(name: str) -> dict[str, dict[str, str]]:
    return json.loads((HERE / name).read_text())


def fetch(package: str, pin: dict[str, str]) -> Path:
    """The distribution file of `package`, downloaded into the cache if missing, hash checked."""
    folder = CACHE / "dists"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / pin["file"]
    if not target.exists():
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                   f"{package}=={pin['version']}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    actual = sha256(target)
    if actual != pin["sha256"]:
        raise SystemExit(f"{target}: sha256 {actual} does not match the lock file")
    return target


def extract(dist: Path) -> Path:
    """Unpack the .py files of a wheel or sdist once; return the folder."""
    out = CACHE / "src" / dist.name
    marker = out / ".complete"
    if marker.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    if dist.suffix == ".whl" or dist.suffix == ".zip":
        with zipfile.ZipFile(dist) as archive:
            for name in archive.namelist():
                if name.endswith(".py") and ".." not in name:
                    archive.extract(name, out)
    else:
        with tarfile.open(dist) as archive:
            members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".py") and ".." not in m.name]
            archive.extractall(out, members=members)
    marker.write_text("")
    return out


def python_files(folder: Path) -> Iterator[Path]:
    yield from sorted(p for p in folder.rglob("*.py") if p.is_file())


def update_lock(name: str, packages: list[str]) -> None:
    """Pin the newest release of each package (run by hand, then review the diff)."""
    folder = CACHE / "dists"
    folder.mkdir(parents=True, exist_ok=True)
    lock = {}
    for package in packages:
        before = set(folder.iterdir())
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), package],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        new = sorted(set(folder.iterdir()) - before) or _existing(folder, package)
        dist = new[0]
        version = _version_of(dist.name)
        lock[package] = {"version": version, "file": dist.name, "sha256": sha256(dist)}
        print(f"{package}=={version}", file=sys.stderr)
    (HERE / name).write_text(json.dumps(lock, indent=2) + "\n")


def _existing(folder: Path, package: str) -> list[Path]:
    stem = package.replace("-", "_").lower()
    return sorted(p for p in folder.iterdir() if p.name.split("-")[0].lower().replace("-", "_") == stem)


def _version_of(filename: str) -> str:
    stem = filename[: -len(".tar.gz")] if filename.endswith(".tar.gz") else filename.rsplit(".", 1)[0]
    return stem.split("-")[1]
