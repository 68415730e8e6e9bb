"""Every test starts with an empty cache of its own: a CLI run never reads what another test
(or a developer's earlier run) left in the working directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEROGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("zerograd-cache")))
