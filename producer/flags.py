"""The CLI's flags, made from the options' declarations (prism/options.py, workers/settings.py):
a command says its name and takes a flag for every option whose declaration lists it. A flag
sets its option over ``PRISM_*`` and the TOML file, checked as they are, and named as the flag
when it is wrong."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, get_args, get_origin

import typer
from pydantic.fields import FieldInfo

from prism.options import flag_of, meta
from workers.settings import Settings, SettingsProblem, load_settings


def flags(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give the command a ``--flag`` for each option that lists it; the function takes them in
    its ``**options`` (unset: None)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func, eval_str=True)
        params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for name, field in Settings.model_fields.items():
            if command in meta(field)["commands"]:
                option = typer.Option(
                    flag_of(name, field), help=describe(name, field), show_default=False, metavar=_metavar(field)
                )
                annotation = Annotated[str | None, option]
                params.append(
                    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
                )

        @functools.wraps(func)
        def command_with_flags(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        command_with_flags.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        command_with_flags.__annotations__ = {p.name: p.annotation for p in params}
        return command_with_flags

    return decorate


def describe(name: str, field: FieldInfo) -> str:
    """An option's help: what it is, its choices, its default and its variable."""
    choices = _choices(field.annotation)
    text = (field.description or "").rstrip(".")
    if choices and not all(c in text for c in choices):
        text += f" ({', '.join(choices)})"
    default = field.get_default(call_default_factory=True)
    shown = "" if default in (None, {}, ()) else f"default {default}; "
    return f"{text} ({shown}PRISM_{name.upper()})."


def _metavar(field: FieldInfo) -> str:
    choices = _choices(field.annotation)
    if choices and len(choices) <= 4:
        return "|".join(choices)
    numbers = {a for a in (field.annotation, *get_args(field.annotation)) if a in (int, float, Decimal)}
    return "NAME" if choices else "N" if numbers == {int} else "NUMBER" if numbers else "TEXT"


def _choices(annotation: Any) -> list[str]:
    """The literal values a type takes, where it is a choice of names."""
    if get_origin(annotation) is typing.Literal:
        return [str(a) for a in get_args(annotation)]
    return [c for arg in get_args(annotation) for c in _choices(arg)]


def settings_with(options: dict[str, Any]) -> Settings:
    """The settings with the flags given on top, a bad one named as its flag."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return load_settings(**given)
    except SettingsProblem as err:
        text = str(err)
        for name in given:
            text = text.replace(f"PRISM_{name.upper()}", flag_of(name, Settings.model_fields[name]))
        raise SettingsProblem(text) from None


def configuration_page() -> str:
    """docs/configuration.md: every option from its declaration (a test keeps the page current)."""
    lines = [
        "# Configuration",
        "",
        "Every option is a `PRISM_*` environment variable, or the same name in lower case as a key of",
        "the TOML file that `PRISM_CONFIG` names; a flag, where a command has one, sets it for that",
        "command. A bad value is one line naming the variable or flag. This page is made from the",
        "options' declarations (`make docs`); a test fails when it is out of date.",
        "",
        "| variable (TOML key) | flag | default | what it sets |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        commands = meta(field)["commands"]
        flag = f"`{flag_of(name, field)}` ({', '.join(commands)})" if commands else ""
        default = field.get_default(call_default_factory=True)
        shown = "" if default in (None, {}, ()) else f"`{default}`"
        help = describe(name, field).rsplit(" (", 1)[0].replace("|", "\\|")
        lines.append(f"| `PRISM_{name.upper()}` ({name}) | {flag} | {shown} | {help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(configuration_page(), end="")
