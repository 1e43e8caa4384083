"""A stand-in for tyro in the runnable subset, where it is not installed:
cli(SomeDataclass) parses the command line into it as tyro does for flat
dataclasses: --field-name VALUE (or --field_name), and --flag / --no-flag for
booleans; a value "None" gives None."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing


def _parser_for(annotation):
    """The argparse type for a field's annotation (Optional[T] parses as T)."""
    if typing.get_origin(annotation) in (
        typing.Union,
        getattr(__import__("types"), "UnionType", None),
    ):
        annotation = next(
            arg for arg in typing.get_args(annotation) if arg is not type(None)
        )

    def parse(text: str):
        if text == "None":
            return None
        return annotation(text) if callable(annotation) else text

    return parse


def cli(f, *, args=None, default=None, **kwargs):
    if not dataclasses.is_dataclass(f):
        raise NotImplementedError("the tyro stub parses dataclasses only")
    hints = typing.get_type_hints(f)
    parser = argparse.ArgumentParser(prog=sys.argv[0])
    for field in dataclasses.fields(f):
        if not field.init:
            continue
        names = [f"--{field.name.replace('_', '-')}"]
        if "_" in field.name:
            names.append(f"--{field.name}")
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = dataclasses.MISSING
        required = value is dataclasses.MISSING
        if hints.get(field.name) is bool:
            parser.add_argument(
                *names,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None if required else value,
                required=required,
            )
        else:
            parser.add_argument(
                *names,
                dest=field.name,
                type=_parser_for(hints.get(field.name, str)),
                default=None if required else value,
                required=required,
            )
    namespace = parser.parse_args(sys.argv[1:] if args is None else list(args))
    return f(**vars(namespace))
