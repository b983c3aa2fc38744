"""Tools for the native agent, with JSON schemas derived from signatures."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from runnertrace.runners.native.types import ExecutionContext

__all__ = ["BaseTool", "FunctionTool", "ToolArgumentsError", "tool"]


class ToolArgumentsError(ValueError):
    """The model called a tool with arguments that do not match its schema."""


class BaseTool:
    """Anything the agent can call: a name, a description, a JSON schema and ``__call__``."""

    name: str
    description: str
    parameters: dict[str, Any]

    async def __call__(self, context: ExecutionContext, **arguments: Any) -> Any:
        raise NotImplementedError

    def definition(self) -> dict[str, Any]:
        """The OpenAI-style function definition of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into a description and per-argument text."""
    doc = inspect.cleandoc(doc)
    description_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
            continue
        if in_args:
            if stripped.endswith(":") and not line.startswith((" ", "\t")):
                in_args = False  # "Returns:" and friends end the argument list
                continue
            match = _ARG_LINE.match(line)
            if match and line.startswith((" ", "\t")) and len(line) - len(line.lstrip()) <= 4:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current and stripped:
                params[current] += " " + stripped
            continue
        if not params:
            description_lines.append(line)
    description = " ".join(
        p.strip() for p in "\n".join(description_lines).split("\n\n")[0].splitlines()
    ).strip()
    return description, params


class FunctionTool(BaseTool):
    """A Python function as a tool. An ``ExecutionContext`` parameter is injected, not shown."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc_description, doc_params = _parse_docstring(fn.__doc__ or "")
        self.description = description if description is not None else doc_description
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        self._context_param: str | None = None
        for pname, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(pname, Any)
            if annotation is ExecutionContext:
                self._context_param = pname
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args/**kwargs cannot be described")
            default = ... if param.default is inspect.Parameter.empty else param.default
            from pydantic import Field

            fields[pname] = (annotation, Field(default, description=doc_params.get(pname)))
        self.arguments_model: type[BaseModel] = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        self.parameters = schema

    async def __call__(self, context: ExecutionContext, **arguments: Any) -> Any:
        try:
            parsed = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(
                f"invalid arguments for tool {self.name!r}: {exc.errors(include_url=False)}"
            ) from exc
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self._context_param:
            kwargs[self._context_param] = context
        result = self.fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    fn: Callable[..., Any | Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a tool; its schema comes from type hints and the docstring."""
    if fn is not None:
        return FunctionTool(fn, name=name, description=description)
    return lambda f: FunctionTool(f, name=name, description=description)
