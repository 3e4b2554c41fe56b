"""Tier 1: the configuration module is the one place where DPMPI_* variables are declared, and
docs/configuration.md is generated from it."""
import re
from pathlib import Path

import pytest

from dpmpi import config

ROOT = Path(__file__).resolve().parent.parent
QUOTED = re.compile(r"""["'](DPMPI_[A-Z0-9_]+)["']""")


def _names_in(paths):
    found = {}
    for path in paths:
        for name in QUOTED.findall(path.read_text()):
            found.setdefault(name, path.relative_to(ROOT))
    return found


def _sources():
    py = [p for p in (ROOT / "dpmpi").rglob("*.py") if p.name != "config.py"]
    return py + sorted((ROOT / "cext").glob("*.c")) + sorted((ROOT / "cext").glob("*.h"))


def test_every_variable_read_is_declared():
    undeclared = {n: str(p) for n, p in _names_in(_sources()).items() if n not in {v.name for v in config.VARS}}
    assert not undeclared, f"declare these in dpmpi/config.py: {undeclared}"


def test_every_declared_variable_is_read_somewhere():
    read = set(_names_in(_sources())) | {m for p in _sources() for m in re.findall(r"DPMPI_[A-Z0-9_]+", p.read_text())
                                         if p.suffix == ".py"}
    stale = [v.name for v in config.VARS if v.name not in read and f"ENV_{v.name[6:]}" not in read]
    assert not stale, f"declared but read nowhere (remove them from dpmpi/config.py): {stale}"


def test_the_docs_page_is_generated_from_the_declarations():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == config.markdown(), "regenerate it: make docs"


def test_the_readme_names_only_declared_variables():
    named = set(re.findall(r"DPMPI_[A-Z0-9_]+", (ROOT / "README.md").read_text()))
    assert named <= {v.name for v in config.VARS}, named - {v.name for v in config.VARS}


def _bad_values(v):
    if v.kind == "bool":
        return ["maybe", "2"]
    if v.kind == "choice":
        return ["sometimes"]
    if v.kind == "int":
        return ["x", "1.5"] + ([str(int(v.minimum) - 1)] if v.minimum is not None else [])
    if v.kind == "seconds":
        return ["soon", "nan", "inf"] + ([str(v.minimum / 2 if v.minimum else -1)] if v.minimum is not None else [])
    return []


@pytest.mark.parametrize("v", [v for v in config.VARS if _bad_values(v)], ids=lambda v: v.name)
def test_a_bad_value_is_refused_with_the_variables_name(v):
    for text in _bad_values(v):
        with pytest.raises(config.ConfigError, match=re.escape(f"{v.name}={text!r}")):
            config.get(v.name, {v.name: text})
        with pytest.raises(ValueError):  # ConfigError is a ValueError: callers that catch that still do
            config.check_all({v.name: text})


def test_unset_or_empty_gives_the_default():
    assert config.get("DPMPI_SPARES", {}) == 0
    assert config.get("DPMPI_SPARES", {"DPMPI_SPARES": " "}) == 0
    assert config.get("DPMPI_HEARTBEAT_TIMEOUT", {"DPMPI_HEARTBEAT_TIMEOUT": "0"}) == 0  # off
    assert config.get("DPMPI_FINALIZE_TIMEOUT", {}, default=2.5) == 2.5  # decided where it is read
    assert config.get("DPMPI_WATCH", {"DPMPI_WATCH": "off"}) is False
    assert config.get("DPMPI_ON_DEPLETED", {"DPMPI_ON_DEPLETED": "Respawn"}) == "respawn"
    assert config.unknown({"DPMPI_SPARE": "1", "DPMPI_SPARES": "1", "HOME": "/"}) == ["DPMPI_SPARE"]
    with pytest.raises(KeyError, match="not a dpmpi setting"):
        config.get("DPMPI_NOPE")
