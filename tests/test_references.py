"""Every reference the project hands its users resolves against this repository (issue 48): a
ref that `pip install git+...@REF`, pre-commit's `rev:` or an Action's `uses: ...@REF` names
exists in git, and every path a link names (the rule links zerograd prints included) exists
at HEAD. A tag written before it was made would fail every newcomer's first install."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from zerograd.analysis.rules import RULES
from zerograd.io.report import repository, rule_url

ROOT = Path(__file__).resolve().parent.parent
HOME = "https://github.com/zerograd/zerograd"
SHIPPED = ["README.md", "action.yml", ".pre-commit-hooks.yaml", "pyproject.toml",
           *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]

_URL = re.compile(re.escape(HOME) + r"""[^\s"'`)<>\]]*""")
_REV = re.compile(r"repo:\s*" + re.escape(HOME) + r"\s*\n\s*rev:\s*(\S+)")
_USES = re.compile(r"uses:\s*zerograd/zerograd@(\S+)")
_LOCAL_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+)\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code, where `nets[0](x)` is no link


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _refs_and_paths() -> tuple[set[str], set[str]]:
    """The git refs and repository paths the shipped texts and the rule links name."""
    refs: set[str] = set()
    paths: set[str] = set()
    urls = [url for name in SHIPPED for url in _URL.findall(_text(name))]
    urls += [url for code in RULES if (url := rule_url(code)) is not None]
    for url in urls:
        rest = url[len(HOME):].split("#")[0]
        if rest.startswith("@"):  # pip's git+URL@REF
            refs.add(rest[1:])
        elif match := re.match(r"/(?:blob|tree)/([^/]+)/(.+)", rest):
            refs.add(match.group(1))
            paths.add(match.group(2))
    for name in SHIPPED:
        text = _text(name)
        refs.update(_REV.findall(text))
        refs.update(_USES.findall(text))
    return refs, paths


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_the_rule_links_name_this_repository() -> None:
    assert repository() == HOME  # the editable install's metadata, as a user's install has it
    assert all(rule_url(code) for code in RULES)


def test_every_ref_exists_in_git() -> None:
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    refs, _ = _refs_and_paths()
    assert refs, "no ref found: the patterns above no longer match the texts"
    missing = [ref for ref in sorted(refs)
               if all(_git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").returncode
                      for name in (ref, f"origin/{ref}"))]
    assert not missing, f"refs named in the docs that this repository does not have: {missing}"


def test_every_linked_path_exists() -> None:
    _, paths = _refs_and_paths()
    assert any(p.startswith("src/zerograd/ruledocs/") for p in paths)
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"paths linked that do not exist: {missing}"


@pytest.mark.parametrize("name", [n for n in SHIPPED if n.endswith(".md")])
def test_every_relative_link_exists(name: str) -> None:
    base = (ROOT / name).parent
    links = [link.split("#")[0] for link in _LOCAL_LINK.findall(_CODE.sub("", _text(name)))]
    missing = [link for link in links if link and not (base / link).exists()]
    assert not missing, f"{name} links to missing paths: {missing}"
