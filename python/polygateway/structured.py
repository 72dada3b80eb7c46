"""``structured=Model``: a pydantic model class as the schema and the validator of a call.

The runtime runs the ladder (schema in the provider's strongest mode, repair, validation,
bounded re-ask with the errors fed back); this module supplies what the model class knows: the
JSON Schema (``model_json_schema()``) and the verdict on each repaired answer
(``model_validate``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

__all__ = ["SchemaCall", "schema_call"]


@dataclass(frozen=True)
class SchemaCall:
    """What the runtime needs for one structured call."""

    name: str
    schema_json: str
    validate: Callable[[str], Optional[List[str]]]
    instance: Callable[[Any], Any]


def schema_call(model: Any) -> SchemaCall:
    """The schema and validator of a pydantic v2 model class (``ValueError`` for anything else)."""
    if not (isinstance(model, type) and hasattr(model, "model_json_schema")
            and hasattr(model, "model_validate")):
        raise ValueError(
            "structured must be None, 'json' or a pydantic model class (BaseModel subclass), "
            f"not {model!r}"
        )

    def validate(text: str) -> Optional[List[str]]:
        try:
            model.model_validate(json.loads(text))
        except Exception as exc:  # pydantic.ValidationError, or a validator's own error
            errors = getattr(exc, "errors", None)
            if callable(errors):
                return [
                    f"{'.'.join(str(p) for p in e.get('loc', ())) or '(root)'}: {e.get('msg', '')}"
                    for e in errors()
                ]
            return [str(exc)]
        return None

    return SchemaCall(
        name=model.__name__,
        schema_json=json.dumps(model.model_json_schema()),
        validate=validate,
        instance=model.model_validate,
    )
