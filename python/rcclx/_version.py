"""The package version is the crate's (`[package] version` of Cargo.toml): one number for both.

`setup.py` reads it with `read_crate_version` at build time (the wheel's metadata); at run time
`__version__` comes from the installed metadata, or from Cargo.toml when the package is used
from a source checkout (PYTHONPATH=python, or an editable install).
"""

import os
import re


def read_crate_version(cargo_toml):
    """`version` of the `[package]` table of a Cargo.toml (a plain string, as rcclx writes it)."""
    section = None
    with open(cargo_toml, encoding="utf-8") as f:
        for line in f:
            s = line.split("#", 1)[0].strip()
            m = re.match(r"^\[\s*([^\[\]]+?)\s*\]$", s)
            if m:
                section = m.group(1)
                continue
            if section == "package":
                m = re.match(r'^version\s*=\s*"([^"]+)"$', s)
                if m:
                    return m.group(1)
    raise ValueError(f"{cargo_toml}: no [package] version")


def _detect():
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.dirname(os.path.dirname(here))
    cargo = os.path.join(checkout, "Cargo.toml")
    if os.path.isfile(cargo) and os.path.isfile(os.path.join(checkout, "python", "setup.py")):
        try:
            return read_crate_version(cargo)
        except (OSError, ValueError):
            pass
    try:
        from importlib.metadata import version

        return version("rcclx")
    except Exception:  # not installed, or no metadata
        return "0+unknown"


__version__ = _detect()
