"""Prints, one a line, the arguments that tell `uv pip install` the package sources pip is configured with here.

pip reads its settings from its configuration files and from PIP_* variables; uv reads neither. tools/setup_env.sh
installs the course's pins with uv and passes it these arguments, so that both take the packages from the same
places: an index that replaces PyPI, extra indexes, folders or pages of links, no index at all (a wheelhouse),
constraint files, and hosts trusted without HTTPS. The settings are the ones pip's own `pip install` resolves (its
option parser, with pip's precedence of files and variables), not a reading of its files. A folder of links that does
not exist is left out (pip warns and goes on; uv would stop). Whatever else pip is told (a certificate bundle, a
proxy in its files, binary-only rules) uv is not: where that makes uv fail, the set-up has pip install the pins.
Exits 1, printing nothing, where pip's options cannot be read (the set-up then uses pip).

    python tools/pip_to_uv.py      # run with the environment's Python, whose pip is the one configured
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import unquote, urlparse


def pip_install_options():
    """The options `pip install` runs with here, from pip's own parser (its files and PIP_* variables)."""
    from pip._internal.commands import create_command

    options, _ = create_command("install").parse_args([])
    return options


def reachable(link: str) -> bool:
    """A link source pip would read: a URL, or a folder or file that exists (pip only warns about one that does not)."""
    parsed = urlparse(link)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).exists()
    return bool(parsed.scheme and parsed.netloc) or Path(link).exists()


def uv_arguments(options) -> list[str]:
    """The `uv pip install` arguments that name the same package sources as pip's options."""
    args = ["--no-config"]  # uv's own configuration files do not add to pip's
    if options.no_index:
        args.append("--no-index")
    if options.index_url:
        args += ["--index-url", options.index_url]
    for url in options.extra_index_urls or []:
        args += ["--extra-index-url", url]
    for link in options.find_links or []:
        if reachable(link):
            args += ["--find-links", link]
    for path in options.constraints or []:
        args += ["--constraint", path]
    for host in options.trusted_hosts or []:
        args += ["--allow-insecure-host", host]
    if options.extra_index_urls or "--find-links" in args:
        args += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version of every source, not the first
    return args


def main() -> int:
    try:
        options = pip_install_options()
    except Exception as error:  # pip's internals moved: the set-up installs with pip itself
        print(f"[setup] pip's options could not be read for uv ({error})", file=sys.stderr)
        return 1
    for arg in uv_arguments(options):
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
