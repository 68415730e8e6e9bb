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
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

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


def split_of(name: str) -> str:
    """The fixed rule that keeps a third of the corpus apart (issue 12): decided by a hash of the
    name before anything is reviewed, recorded in the lock file."""
    return "check" if int(hashlib.sha256(name.lower().encode()).hexdigest(), 16) % 3 == 0 else "tune"


def update_lock(name: str, packages: list[str]) -> None:
    """Pin the newest release of each package (run by hand, then review the diff). A package pip
    cannot fetch is left out with a message; pins already in the lock are kept."""
    folder = CACHE / "dists"
    folder.mkdir(parents=True, exist_ok=True)
    path = HERE / name
    lock = json.loads(path.read_text()) if path.exists() else {}
    for package in packages:
        if package in lock:
            lock[package].setdefault("split", split_of(package))
            continue
        before = set(folder.iterdir())
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                                 package], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        new = sorted(set(folder.iterdir()) - before) or _existing(folder, package)
        if result.returncode != 0 or not new:
            print(f"{package}: not available, left out", file=sys.stderr)
            continue
        dist = new[0]
        lock[package] = {"version": _version_of(dist.name), "file": dist.name, "sha256": sha256(dist),
                         "split": split_of(package)}
        print(f"{package}=={lock[package]['version']} ({lock[package]['split']})", file=sys.stderr)
        path.write_text(json.dumps(lock, indent=2) + "\n")  # as it goes: a long run can be resumed
    path.write_text(json.dumps(lock, indent=2) + "\n")


def _existing(folder: Path, package: str) -> list[Path]:
    stem = package.replace("-", "_").lower()
    return sorted(p for p in folder.iterdir() if p.name.split("-")[0].lower().replace("-", "_") == stem)


def _version_of(filename: str) -> str:
    stem = filename[: -len(".tar.gz")] if filename.endswith(".tar.gz") else filename.rsplit(".", 1)[0]
    return stem.split("-")[1]


# --- GitHub repositories -------------------------------------------------------------------
# Read from a local mirror (ZEROGRAD_MIRROR: one git directory per repository, named owner+name),
# or cloned at the pinned commit into the cache when the network allows; skipped otherwise.
MIRROR = Path(os.environ.get("ZEROGRAD_MIRROR", CACHE / "mirror"))


def git_dir(repo: str) -> Optional[Path]:
    """The git directory of `owner/name` in the mirror, cloning it there if need be."""
    base = MIRROR / repo.replace("/", "+")
    for candidate in (base / "repo" / ".git", base / "repo", base / ".git", base):
        if (candidate / "HEAD").exists():
            return candidate
    MIRROR.mkdir(parents=True, exist_ok=True)
    clone = subprocess.run(["git", "clone", "--quiet", "--bare", f"https://github.com/{repo}", str(base)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return base if clone.returncode == 0 else None


def extract_repo(repo: str, pin: dict[str, str]) -> Optional[Path]:
    """The .py and .ipynb files of `repo` at its pinned commit, unpacked once; None: unavailable."""
    out = CACHE / "src" / f"{repo.replace('/', '+')}@{pin['commit'][:12]}"
    if (out / ".complete").exists():
        return out
    found = git_dir(repo)
    if found is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(["git", f"--git-dir={found}", "ls-tree", "-r", "-z", pin["commit"]],
                             capture_output=True)
    if listing.returncode != 0:
        return None  # the mirror does not hold the pinned commit
    # One blob at a time: a snapshot may list its largest files without holding them.
    for entry in listing.stdout.split(b"\0"):
        meta, _, name = entry.decode("utf-8", "replace").partition("\t")
        if not name.endswith((".py", ".ipynb")) or ".." in name or " blob " not in meta:
            continue
        blob = subprocess.run(["git", f"--git-dir={found}", "cat-file", "blob", meta.split()[2]], capture_output=True)
        if blob.returncode == 0:
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blob.stdout)
    (out / ".complete").write_text("")
    return out


def pin_repos(name: str, repos: list[str]) -> None:
    """Pin each repository at its mirror's HEAD (run by hand, then review the diff)."""
    path = HERE / name
    lock = json.loads(path.read_text()) if path.exists() else {}
    for repo in repos:
        found = git_dir(repo)
        if repo in lock or found is None:
            if found is None:
                print(f"{repo}: no mirror and no network, left out", file=sys.stderr)
            continue
        head = subprocess.run(["git", f"--git-dir={found}", "rev-parse", "HEAD"], capture_output=True, text=True)
        lock[repo] = {"commit": head.stdout.strip(), "split": split_of(repo)}
    path.write_text(json.dumps(lock, indent=2) + "\n")
