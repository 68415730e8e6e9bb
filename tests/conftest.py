"""Every test starts with an empty cache of its own: a CLI run never reads what another test
(or a developer's earlier run) left in the working directory. The key that signs cache entries
is the session's own, never the developer's (project/key.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEROGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("zerograd-cache")))
    monkeypatch.setenv("ZEROGRAD_KEY_DIR", str(tmp_path_factory.getbasetemp() / "zerograd-key"))
    monkeypatch.setenv("ZEROGRAD_STRICT", "1")  # a linked group that fails is a test failure, not a fallback
