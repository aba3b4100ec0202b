"""The JSON Schemas of gpubench's files (gpubench/schemas/), compiled once: fast where a value is
valid (fastjsonschema), exact where it is not (jsonschema's errors, in words by schema_words)."""

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RANGE_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "pattern", "not"})  # form


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
    for kind in kept.get("$defs", {}).values():  # each value kind takes null too
        types = kind.get("type") if isinstance(kind, dict) else None
        if types is not None and "null" not in types:
            kind["type"] = [*([types] if isinstance(types, str) else types), "null"]
    if "required" in kept:
        kept["required"] = [n for n in kept["required"]
                            if not part.get("properties", {}).get(n, {}).get("droppable")]
    return kept


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
        self.compiled = fastjsonschema.compile(schema, use_default=False)
        self.failed = fastjsonschema.JsonSchemaException

    def valid(self, instance: Any) -> bool:
        """Whether `instance` passes: the compiled check, and where it fails, jsonschema's."""
        try:
            self.compiled(instance)
        except self.failed:
            return not next(self.errors(instance), None)
        return True

    def errors(self, instance: Any) -> Iterator[Any]:
        """jsonschema's errors of `instance`, in the schema's order (imported where one fails)."""
        import jsonschema  # noqa: PLC0415 - 0.1 s to import

        return jsonschema.Draft202012Validator(self.schema).iter_errors(instance)


@functools.cache
def checker(name: str, part: str | None = None) -> Checker:
    """The schema NAME (or its definition `part`, "$defs/PART"), compiled once."""
    root = load(name)
    return Checker(root if part is None else {"$defs": root["$defs"], **root["$defs"][part]})
