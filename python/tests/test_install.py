"""The installed package as a user gets it: its metadata (the original's extras, the Python floor)
and, under CI (python/ci.sh), that the suite imports it from the wheel installed into the
virtual environment, not from the source tree."""

from __future__ import annotations

import json
import os
import sysconfig
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

import polygateway
from polygateway import _native

CI = os.environ.get("CI") == "true"


def _requirements_of_extra(extra: str):
    """The Requires-Dist lines whose marker is `extra == "<extra>"`, as (name, specifier)."""
    found = []
    for line in metadata.requires("polygateway") or []:
        requirement, _, marker = line.partition(";")
        if marker.replace(" ", "").replace("'", '"') == f'extra=="{extra}"':
            found.append(requirement.strip())
    return found


def test_the_original_extras_are_declared():
    extras = set(metadata.metadata("polygateway").get_all("Provides-Extra") or [])
    # `pip install "polygateway[redis,postgres,structured]"`, the original README's line.
    assert {"structured", "redis", "postgres"} <= extras, extras
    structured = _requirements_of_extra("structured")
    assert any(req.replace(" ", "").startswith("pydantic>=2") for req in structured), structured
    # Redis and PostgreSQL are compiled into the extension module: no Python client to pull in.
    assert _requirements_of_extra("redis") == []
    assert _requirements_of_extra("postgres") == []


def test_metadata_names_the_python_floor_and_a_version():
    meta = metadata.metadata("polygateway")
    assert meta["Requires-Python"] == ">=3.9"
    # The version comes from the Cargo package (pyproject's `dynamic = ["version"]`).
    parts = meta["Version"].split(".")
    assert len(parts) >= 3 and all(part.isdigit() for part in parts[:3]), meta["Version"]


def test_the_package_carries_its_native_module_and_type_information():
    package = Path(polygateway.__file__).resolve().parent
    assert Path(_native.__file__).resolve().parent == package
    assert (package / "py.typed").is_file()
    assert (package / "_native.pyi").is_file()


def test_imported_from_the_installed_wheel():
    wheel = os.environ.get("PGW_PY_WHEEL")
    if not wheel:
        if CI:
            pytest.fail("CI=true runs this suite through python/ci.sh, which sets PGW_PY_WHEEL")
        pytest.skip("not run from python/ci.sh (PGW_PY_WHEEL unset): nothing to compare against")
    site_dirs = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    package = Path(polygateway.__file__).resolve().parent
    assert package.parent in site_dirs, f"polygateway imported from {package}, not {site_dirs}"
    # pip records where an install came from (PEP 610): the wheel file, not a directory or an
    # editable checkout.
    origin = json.loads(metadata.distribution("polygateway").read_text("direct_url.json") or "{}")
    assert "dir_info" not in origin, origin
    assert Path(unquote(urlparse(origin["url"]).path)).resolve() == Path(wheel).resolve(), origin
