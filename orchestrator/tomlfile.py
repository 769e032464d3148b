"""Reading a TOML file a user edits (campaign.toml, the decision rules, the kernel rules): one
place for the one-line errors. Imports no pydantic: the analyser's workers read rules.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from orchestrator.errors import InputError


def read_toml(path: Path, what: str = "") -> dict[str, Any]:
    """A TOML file a user edits, read: anything wrong is one line naming the file and the fix
    (``what`` prefixes the reason, e.g. "bad rules file: ")."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: {what}not valid TOML ({err}); fix the syntax there") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: {what}not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a TOML file; name the file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror}); check the path and its permissions") from None
