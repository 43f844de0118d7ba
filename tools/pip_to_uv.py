"""Prints, one a line, the arguments that tell `uv pip install` the package sources pip is configured with here.

pip reads its settings from its configuration files and from PIP_* variables (`pip config list` shows both); uv reads
neither. tools/setup_env.sh installs the course's pins with uv and passes it these arguments, so that both installers
take the same packages from the same places: an index that replaces PyPI, extra indexes, folders or pages of links,
no index at all (a wheelhouse), and constraint files. Precedence is pip's for `pip install`: a PIP_* variable over the
[install] section over [global].

    python tools/pip_to_uv.py      # run with the environment's Python, whose pip is the one configured
"""

from __future__ import annotations

import ast
import subprocess
import sys

# pip's setting -> (uv's option, whether the setting is a list, separated by white space)
OPTIONS = {
    "index-url": ("--index-url", False),
    "extra-index-url": ("--extra-index-url", True),
    "find-links": ("--find-links", True),
    "constraint": ("--constraint", True),
}
TRUE = {"1", "true", "yes", "on"}
RANK = {"global": 0, "install": 1, ":env:": 2}  # a later section overrides an earlier one


def settings(listing: str) -> dict[str, str]:
    """pip's settings for `pip install`, from the lines of `pip config list` (`section.name='value'`)."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not (sep and dot) or section not in RANK:
            continue
        try:
            text = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue
        if name not in found or RANK[section] >= found[name][0]:
            found[name] = (RANK[section], str(text))
    return {name: value for name, (_, value) in found.items()}


def uv_arguments(config: dict[str, str]) -> list[str]:
    """The `uv pip install` arguments that name the same package sources as pip's settings."""
    args: list[str] = []
    if config.get("no-index", "").strip().lower() in TRUE:
        args.append("--no-index")
    for name, (option, many) in OPTIONS.items():
        for value in config.get(name, "").split() if many else [config.get(name, "").strip()]:
            if value:
                args += [option, value]
    if "--extra-index-url" in args or "--find-links" in args:
        args += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version of every source, not the first
    return args


def main() -> int:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    print("\n".join(uv_arguments(settings(listing))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
