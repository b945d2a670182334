"""idempotent_tool: an agent's mutating tool that records its effect once
per logical action, whatever repeats it (a client timeout, a framework's
auto-retry, the model calling the tool again).

It is a plain decorator: the function it returns is what you hand to your
agent framework (LangChain's ``@tool``, the OpenAI Agents SDK's
``function_tool``, a raw tool-call dispatcher), which sees an ordinary
function of the same signature.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .http import OutboxClient
from .intent import EnqueueResult, Intent

#: Where a tool's key comes from (docs/agents.md, "Keys"):
#: "orchestrator" (the default, the safest): key_from derives it from what
#: names the logical action (an order id, a run and step id), the same on
#: every retry;
#: "model": the key is an argument the model passed; it is sent with
#: Idempotency-Key-Source: model, so the server guards it (a model asked to
#: reuse a key sometimes invents a fresh one: PossibleDuplicateError).
KEY_ORIGINS = ("orchestrator", "model")


def idempotent_tool(client: OutboxClient, effect: str, *, key_from: Callable[..., str],
                    key_origin: str = "orchestrator", wait_seconds: float = 30.0, require_approval: bool = False,
                    requested_by: str | None = None) -> Callable[[Callable[..., Mapping[str, Any]]], Callable[..., dict]]:
    """Makes a function that builds an effect's arguments into a tool that
    records the effect through client, once per logical action.

    ``key_from(*args, **kwargs)`` names the logical action, and
    ``key_origin`` says who chose it (KEY_ORIGINS). The tool answers the
    intent as a dict (the API's JSON, with ``duplicate``) once it is
    terminal or after ``wait_seconds``; an intent awaiting a person's
    approval is answered at once, so the model can say so. Errors are
    raised (OutboxError subclasses), for the framework to report.
    """
    if key_origin not in KEY_ORIGINS:
        raise ValueError(f"key_origin must be one of {KEY_ORIGINS}, not {key_origin!r}")

    def decorate(build_args: Callable[..., Mapping[str, Any]]) -> Callable[..., dict]:
        @functools.wraps(build_args)
        def tool(*args: Any, **kwargs: Any) -> dict:
            key = key_from(*args, **kwargs)
            recorded: EnqueueResult = client.enqueue(
                key=key, effect=effect, args=build_args(*args, **kwargs), requested_by=requested_by,
                require_approval=require_approval, key_source="model" if key_origin == "model" else None)
            intent: Intent = recorded.intent
            if not intent.terminal and intent.state != "awaiting_approval" and wait_seconds > 0:
                # A person's approval is not waited for: it may take hours,
                # and calling again, under this key or another, will not
                # hurry it.
                intent = client.wait(key, timeout=wait_seconds)
            out = intent.to_json()
            out["duplicate"] = recorded.duplicate
            return out

        tool.outbox_effect = effect  # type: ignore[attr-defined]
        return tool

    return decorate
