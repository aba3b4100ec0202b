"""The JSON Schemas of gpubench's files (gpubench/schemas/: a results record, run.json), compiled
once; a failing field said in words. Fast where a value is valid (fastjsonschema's compiled code),
exact where it is not (jsonschema's errors, draft 2020-12)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

# The keywords of a value's range and form; without them a schema asks only for fields and types.
RANGE_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "pattern", "not"})
TYPE_WORDS = {"string": "a string", "integer": "a whole number", "number": "a number",
              "boolean": "true or false", "object": "a JSON object", "array": "a list",
              "null": "null"}
# Keywords that apply to a value of any type: "X or null" is X taking null only without them.
ANY_TYPE = frozenset({"not", "anyOf", "allOf", "if", "const", "enum"})
MISSING = "(missing)"


@functools.cache
def load(name: str) -> dict:
    """The schema gpubench/schemas/NAME.schema.json."""
    return json.loads((Path(__file__).parent / "schemas" / f"{name}.schema.json").read_bytes())


def resolve(root: dict, part: dict) -> dict:
    """`part`, or the definition its "$ref" ("#/$defs/NAME") points to in `root`."""
    return root["$defs"][part["$ref"].rsplit("/", 1)[1]] if "$ref" in part else part


def types_only(part: Any) -> Any:
    """`part` without ranges, a droppable field allowed anything (or to be missing), each value
    kind ($defs) taking null: what a file must hold to be read at all."""
    if isinstance(part, list):
        return [types_only(v) for v in part]
    if not isinstance(part, dict):
        return part
    if part.get("droppable") is True:
        return True
    kept = {k: types_only(v) for k, v in part.items() if k not in RANGE_KEYWORDS}
    if "$defs" in kept:
        kept["$defs"] = {name: or_null(kind) for name, kind in kept["$defs"].items()}
    if "required" in kept:
        kept["required"] = [n for n in kept["required"]
                            if not part.get("properties", {}).get(n, {}).get("droppable")]
    return kept


def or_null(part: Any) -> Any:
    """`part`, taking null as well where it names a type."""
    types = part.get("type") if isinstance(part, dict) else None
    if types is None or "null" in types:
        return part
    return {**part, "type": [*([types] if isinstance(types, str) else types), "null"]}


def inlined(root: dict, part: Any) -> Any:
    """`part` with each "$ref" replaced by its definition and each "X or null" (anyOf) of a
    typed X written as X taking null: the same checks, as compiled code runs them fastest."""
    if isinstance(part, list):
        return [inlined(root, v) for v in part]
    if not isinstance(part, dict):
        return part
    if "$ref" in part:
        return inlined(root, resolve(root, part))
    part = {k: inlined(root, v) for k, v in part.items() if k != "$defs"}
    options = part.get("anyOf", ())
    if len(options) == 2 and {"type": "null"} in options:
        (other,) = [o for o in options if o != {"type": "null"}]
        if "type" in other and not ANY_TYPE & set(other):
            part = {**{k: v for k, v in part.items() if k != "anyOf"}, **or_null(other)}
    return part


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


def declared(root: dict, part: dict, where: dict) -> dict[str, dict]:
    """The fields `part` of `root` declares (through "$ref", "allOf" and "then"), skipping a
    "then" whose "if" asks another value of a field in `where` ({"benchmark": "train"})."""
    part = resolve(root, part)
    found = dict(part.get("properties", {}))
    branches = [*part.get("allOf", ())]
    asked = part.get("if", {}).get("properties", {})
    if "then" in part and all(asked.get(k, {}).get("const", v) == v for k, v in where.items()):
        branches.append(part["then"])
    for branch in branches:
        for name, rule in declared(root, branch, where).items():
            found.setdefault(name, rule)
    return found


def value_at(instance: Any, path: list) -> Any:
    """The value at `path` (["telemetry", "energy_joules"]) of `instance`; None where absent."""
    for name in path:
        instance = instance.get(name) if isinstance(instance, dict) else None
    return instance


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


class Checker:
    """One schema, compiled once: `valid` is the fast path, `errors` says what fails."""

    def __init__(self, schema: dict) -> None:
        """Compile `schema` (a draft 2020-12 schema of gpubench/schemas/)."""
        import fastjsonschema  # noqa: PLC0415 - setup runs gpubench on a bare Python

        self.schema = schema
        self.compiled = fastjsonschema.compile(inlined(schema, schema), use_default=False)
        self.failed = fastjsonschema.JsonSchemaException

    def valid(self, instance: Any) -> bool:
        """Whether `instance` passes: the compiled check, and where it fails, jsonschema's."""
        try:
            self.compiled(instance)
        except self.failed:
            return not next(self.errors(instance), None)
        return True

    @functools.cached_property
    def exact(self) -> Any:
        """jsonschema's validator, made where a value first fails (0.1 s to import)."""
        import jsonschema  # noqa: PLC0415

        return jsonschema.Draft202012Validator(self.schema)

    def errors(self, instance: Any) -> Iterator[Any]:
        """jsonschema's errors of `instance`, in the schema's order."""
        return self.exact.iter_errors(instance)


@functools.cache
def checker(name: str, part: str | None = None) -> Checker:
    """The schema NAME (or its definition `part`, "$defs/PART"), compiled once."""
    root = load(name)
    return Checker(root if part is None else {"$defs": root["$defs"], **root["$defs"][part]})
