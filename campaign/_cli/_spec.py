"""The settings of `campaign run`, from the command line or from a spec file (TOML).

A spec file names the target, the items, the ledger and the execution options, so that a
campaign is rerun with one short command (``campaign run campaign.toml``). Relative paths in it
are relative to the spec file's folder; options given on the command line override it.
"""

from __future__ import annotations

import copy
import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from .._policy import MAX_INTERRUPTIONS, RETRIES
from ._exits import BadInput


@dataclass
class RunConfig:
    """Everything `campaign run` needs; paths already resolved against their base folder."""

    target: str
    items: Path
    ledger: Path
    base: Path
    execution: str = "serial"
    retries: int = RETRIES
    resume: bool = True
    max_interruptions: int = MAX_INTERRUPTIONS
    id_field: str | None = None
    ignore_fields: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    array: dict[str, Any] = field(default_factory=dict)
    spec: Path | None = None


#: `RunConfig`'s fields that `resolve` sets itself, not a spec.
_NOT_IN_SPEC = ("base", "spec")


def _spec_keys() -> dict[str, tuple[type, Any]]:
    """The keys of a spec file, their TOML types and defaults (None: no default), from
    `RunConfig`'s fields: a path is a string in TOML, ``X | None`` an ``X``, ``list[str]`` a
    list."""
    hints = typing.get_type_hints(RunConfig)
    keys: dict[str, tuple[type, Any]] = {}
    for f in fields(RunConfig):
        if f.name in _NOT_IN_SPEC:
            continue
        kind = hints[f.name]
        if isinstance(kind, types.UnionType):
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        kind = typing.get_origin(kind) or kind
        default = (f.default if f.default is not MISSING else
                   f.default_factory() if f.default_factory is not MISSING else None)
        keys[f.name] = (str if kind is Path else kind, default)
    return keys


#: The keys of a spec file, their types and defaults (None: no default).
SPEC_KEYS: dict[str, tuple[type, Any]] = _spec_keys()


def read_spec(path: Path) -> dict[str, Any]:
    """The checked contents of a spec file; raises `BadInput` on any problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"spec file {path} does not exist: check the path") from None
    except OSError as exc:
        raise BadInput(f"cannot read spec file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"spec file {path} is not UTF-8 text ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"spec file {path} is not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in SPEC_KEYS]
    if unknown:
        valid = ", ".join(SPEC_KEYS)
        raise BadInput(
            f"spec file {path} has the unknown {'key' if len(unknown) == 1 else 'keys'} "
            f"{', '.join(map(repr, unknown))}{_table_hint(data, unknown)}; the valid keys are: "
            f"{valid} (see docs/cli.md)"
        )
    for key, value in data.items():
        kind = SPEC_KEYS[key][0]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise BadInput(
                f"spec file {path}: {key} = {value!r} is {_a(_toml_type(value))}; it must be "
                f"{_a(_toml_type(kind()))}"
            )
        if kind is int and value < 0:
            raise BadInput(f"spec file {path}: {key} = {value} must be 0 or more")
        if kind is list and not all(isinstance(v, str) and v for v in value):
            raise BadInput(f"spec file {path}: {key} = {value!r} must be a list of field names, "
                           f'e.g. {key} = ["notes"]')
    return data


def resolve(target: str, flags: dict[str, Any]) -> RunConfig:
    """Combine the TARGET argument (a function, or a ``.toml`` spec) with the flags given.

    ``flags`` maps spec keys to command-line values; None means "not given". Paths given on
    the command line are relative to the current folder, those in a spec to the spec's folder.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    settings: dict[str, Any] = {k: copy.copy(default) for k, (_, default) in SPEC_KEYS.items()}
    spec: Path | None = None
    if target.endswith(".toml"):
        spec = Path(target)
        data = read_spec(spec)
        settings.update(data)
        for key in ("items", "ledger"):
            if key in data:
                settings[key] = spec.parent / data[key]
        base = spec.resolve().parent
    else:
        settings["target"] = target
        base = Path.cwd()
    if "ignore_fields" in given:  # the flags add to the spec's
        given["ignore_fields"] = list(dict.fromkeys([*settings["ignore_fields"],
                                                     *given["ignore_fields"]]))
    settings.update(given)
    missing = [k for k in ("target", "items", "ledger") if settings[k] is None]
    if missing and spec is not None:
        raise BadInput(
            f"spec file {spec} does not name {' or '.join(missing)}; add "
            + ", ".join(f'{k} = "..."' for k in missing) + " to it (see docs/cli.md)"
        )
    if missing:
        raise BadInput(
            f"campaign run {target} needs {' and '.join('--' + k for k in missing)} (or a spec "
            "file: campaign run SPEC.toml); see campaign run --help"
        )
    settings["items"], settings["ledger"] = Path(settings["items"]), Path(settings["ledger"])
    return RunConfig(base=base, spec=spec, **settings)


def array_keys() -> tuple[str, ...]:
    """The keys of the spec's ``[array]`` table (`campaign submit`): `submit_array`'s own
    ``job_name`` and ``log_dir``, the keywords of `schedulers.slurm.render_array_script` it
    passes on (`campaign._array._submit.script_options`, read from the signature when asked, so
    the CLI starts without importing Slurm's code), then the workers' ``lease_seconds``."""
    from .._array._submit import script_options

    return ("job_name", "log_dir", *script_options(), "lease_seconds")


def _table_hint(data: dict[str, Any], unknown: list[str]) -> str:
    """`` (did you mean [options] workers = 2?)`` for a key that belongs in a table: an option
    of a scheduler (``[options]``) or of `campaign submit` (``[array]``)."""
    options, array = scheduler_options(), array_keys()
    hints = []
    for key in unknown:
        tables = [t for t, keys in (("options", options), ("array", array)) if key in keys]
        if tables:
            hints.append(" or ".join(f"[{t}] {key} = {_toml_value(data[key])}" for t in tables))
    return f" (did you mean {'; '.join(hints)}?)" if hints else ""


def scheduler_options() -> set[str]:
    """The names of the options every scheduler's constructor takes (the ``[options]`` keys)."""
    import inspect

    from schedulers import SCHEDULERS

    names: set[str] = set()
    for cls in SCHEDULERS.values():
        names.update(name for name, p in inspect.signature(cls).parameters.items()
                     if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
    return names


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _toml_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", str: "string", dict: "table", float: "float",
            list: "array"}.get(type(value), type(value).__name__)


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun
