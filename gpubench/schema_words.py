"""A schema error in words: the field, its value and what the schema asks for; loaded only where
a record or run.json fails its schema (gpubench.schema): the writer, the readers, --resume."""

import json
from typing import Any, NamedTuple

from gpubench.schema import resolve

TYPE_WORDS = {"string": "a string", "integer": "a whole number", "number": "a number",
              "boolean": "true or false", "object": "a JSON object", "array": "a list",
              "null": "null"}
MISSING = "(missing)"


def words(root: dict, part: dict | bool) -> str:
    """What `part` asks for, in words: its description, else built from its types."""
    if not isinstance(part, dict):
        return "anything" if part else "nothing"
    if "description" in part:
        return part["description"]
    if "$ref" in part:
        return words(root, resolve(root, part))
    if "anyOf" in part:
        return " or ".join(words(root, p) for p in part["anyOf"])
    if "enum" in part:
        return "one of " + ", ".join(map(str, part["enum"]))
    if part.get("type") == "array" and "items" in part:
        return f"a list of ({words(root, part['items'])})"
    types = part.get("type", [])
    return " or ".join(TYPE_WORDS[t] for t in ([types] if isinstance(types, str) else types))


class Problem(NamedTuple):
    """A schema error in words: the field's path and name, its value, and what it should be."""

    path: list  # the keys and list indexes down to the field
    field: str  # the path as text: "jobs[0].attempt", "environment.hostname"
    value: Any  # the value found (MISSING where the field is absent)
    wants: str  # what the schema asks for, in words
    droppable: bool  # a field marked droppable: a bad one costs only itself


def explain(root: dict, error: Any) -> Problem:
    """jsonschema's `error` of an instance of schema `root`, in words: the one wording of a
    schema error (writer, readers, report, `--resume`)."""
    path, value, rule = list(error.absolute_path), error.instance, error.schema
    if error.validator == "required":
        name = next(k for k in error.validator_value if k not in error.instance)
        path, value, rule = path + [name], MISSING, rule.get("properties", {}).get(name, {})
        wants = words(root, rule) if rule else "a value"
    elif error.validator == "additionalProperties":
        name = sorted(set(error.instance) - set(rule.get("properties", ())))[0]
        path, value, wants = path + [name], error.instance[name], "no such field"
    else:
        wants = words(root, rule)
    field = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path).lstrip(".")
    return Problem(path, field or "the record", value, wants, bool(rule.get("droppable")))


def shown(value: Any) -> str:
    """`value` as a message shows it: JSON, cut at 60 characters; MISSING as it is."""
    if value is MISSING:
        return value
    text = json.dumps(value, default=repr) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
