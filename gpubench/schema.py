"""The JSON Schemas of gpubench's files (gpubench/schemas/: a results record, run.json), compiled
once: fast where a value is valid (fastjsonschema's compiled code), exact where it is not
(jsonschema's errors, draft 2020-12, which gpubench.schema_words puts into words)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The keywords of a value's range and form; without them a schema asks only for fields and types.
RANGE_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "pattern", "not"})
# Keywords that apply to a value of any type: "X or null" is X taking null only without them.
ANY_TYPE = frozenset({"not", "anyOf", "allOf", "if", "const", "enum"})


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
