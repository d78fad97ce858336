"""The lab's embedding cache sits in the plugin's user cache, and ESPEW_CACHE_DIR moves it."""

from __future__ import annotations

from espew_integrations.offline.data import DATA_DIR_ENV
from espew_lab.cache import cache_dir


def test_the_lab_cache_follows_xdg_cache_home_and_espew_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.delenv("ESPEW_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "espew-integrations"
    monkeypatch.setenv("ESPEW_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
