"""One import refused at every start of the course environment's Python, to the one module that asks for it.

| package | imported by | for | what its import costs |
|---|---|---|---|
| `rfc3987_syntax` | `jsonschema._format` | checking the formats "iri" and "iri-reference" | it builds an Earley parser of RFC 3987's grammar (lark) at import: 2.3 of the 2.6 CPU-seconds of `import nbformat` |

jsonschema imports it inside `with suppress(ImportError)` and, without it, leaves those two formats unchecked, as it
does wherever the package is not installed (it comes with `jsonschema[format-nongpl]`, which Jupyter's event system
asks for). jsonschema is imported by nbformat (and so by nbstripout, the git filter that runs on every `git status` of
a changed notebook; by nbclient and nbmake; by the workspace merge) and, directly, by the SageMaker SDK. On the
2-core AMD EPYC machine that runs the course's checks (2026-11-30), `import nbformat` took 2.6 CPU-seconds as
installed and 0.3 with the refusal, and the SageMaker SDK's `ModelTrainer` 5.9 and 4.2. No course file, and no
schema of Jupyter's, checks those formats.

Only that importer is refused: any other module, a learner's code included, imports the package as installed.
`COURSE_STARTUP_REFUSALS=0` turns the refusal off.

tools/link_utils.py copies this file into the environment's site-packages, where a `.pth` file of the course's imports
it at every interpreter start (a module there has its bytecode cached; `utils` itself must not be imported then, see
link_utils): the start costs a file lookup, and each import a dictionary lookup.
"""

from __future__ import annotations

import sys

#: The variable that turns the refusal off (set to "0"); tools/link_utils.py's `.pth` line reads it.
VAR = "COURSE_STARTUP_REFUSALS"
#: The package refused, and the module it is refused to.
REFUSED = {"rfc3987_syntax": "jsonschema._format"}


class StartupRefusals:
    """A finder put first on sys.meta_path: refuses REFUSED's packages to their importer; passes on the rest."""

    def find_spec(self, fullname, path=None, target=None):
        refused_to = REFUSED.get(fullname)
        if refused_to is None:  # every other import: one dictionary lookup
            return None
        frame = sys._getframe(1)
        while frame is not None:  # past the import machinery's frames, to the module whose code imports
            name = frame.f_globals.get("__name__", "")
            if not (name == "importlib" or name.startswith(("importlib.", "_frozen_importlib")) or name == __name__):
                if name == refused_to:
                    raise ModuleNotFoundError(
                        f"{fullname} is left out of {refused_to} in the course's environment ({VAR}=0 imports it)",
                        name=fullname,
                    )
                return None
            frame = frame.f_back
        return None


def install() -> None:
    """Put the finder first among the import finders (once: site may read the .pth file twice)."""
    if not any(type(f).__name__ == StartupRefusals.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, StartupRefusals())
