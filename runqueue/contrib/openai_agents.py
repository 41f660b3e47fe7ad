"""The OpenAI Agents SDK on runqueue: ``Runner.run`` / ``run_sync`` /
``run_streamed`` for a handler, so an unchanged ``agents.Agent`` runs
durably.

Inside these calls every model request is one step of the run
(``runqueue.contrib.steps.model_request``) and every function tool call one
``ctx.invoke_tool``; a retry after a crash or a lost lease re-runs the
handler, and the SDK's loop meets each finished request and tool call again
as a replayed record: nothing finished is sent or run twice.

How: while a durable run is active (a context variable, so nested runs and
the SDK's own tasks inherit it and nothing else sees it), three of the SDK's
internal seams are wrapped: the model it resolves for an agent (a
``Model`` instance or a name through ``RunConfig.model_provider`` alike),
the invocation of a function tool (``@function_tool``, MCP tools, tools of
an agent used as a tool), and its ``needs_approval`` evaluation (mapped onto
runqueue's approvals, so the SDK never interrupts the run itself). The
agent, its tools and handoffs are the caller's objects, untouched. The
seams are private to the SDK: the extra pins the minor version
(``openai-agents>=0.24,<0.25``) and ``install`` refuses a version without
them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import json
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator
from contextvars import ContextVar
from typing import Any

try:
    import agents
    import pydantic
    import pydantic_core
    from agents import RunConfig, RunResult, RunResultStreaming
    from agents.items import ItemHelpers, ModelResponse, TResponseInputItem
    from agents.memory.session import SessionABC
    from agents.models.interface import Model, ModelTracing
    from agents.run_config import CallModelData, ModelInputData, ToolExecutionConfig
    from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE, FunctionTool
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseFunctionToolCall,
        ResponseOutputItemDoneEvent,
        ResponseOutputMessage,
        ResponseTextDeltaEvent,
        ResponseUsage,
    )
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "runqueue.contrib.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'django-runqueue[openai-agents]'"
    ) from exc

from runqueue import aio
from runqueue.contrib import on_loop, steps
from runqueue.errors import PermanentError, RunCancelled
from runqueue.leases import payload_digest
from runqueue.models import Idempotency, Run, RunStatus, ToolInvocation, ToolStatus
from runqueue.outcomes import ToolOutcome
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.types import JSON

__all__ = [
    "SESSION_STEP",
    "RunqueueSession",
    "Runner",
    "idempotency_key",
    "idempotent_tool",
    "install",
]

#: The tool name of a step that records items added to the run's session.
SESSION_STEP = "openai_agents.session"
#: The attribute ``idempotent_tool`` sets on a tool.
_IDEMPOTENT_MARK = "_runqueue_idempotent"
#: What the model reads for a call whose worker died while it ran.
UNCERTAIN_OUTPUT = (
    "The outcome of this {tool} call is unknown: it was interrupted ({reason}) and may or may "
    "not have happened. Do not assume that it failed; check before trying it again."
)

_RESPONSE: pydantic.TypeAdapter[ModelResponse] = pydantic.TypeAdapter(ModelResponse)


@dataclasses.dataclass(frozen=True, slots=True)
class _Durable:
    """The durable run the current task belongs to."""

    ctx: AsyncRunContext
    idempotent: frozenset[str]
    #: Text deltas go to the run's stream (``run_streamed``, outermost agent only).
    stream: bool = False
    #: How a steering message reads as the user's words (None: not read).
    steer: Callable[[JSON], str] | None = steps.steer_text
    #: The server keeps the conversation (``previous_response_id``,
    #: ``conversation_id``): a steer is sent once, not with every request.
    server_managed: bool = False
    #: The steers this run took: (where in the SDK's input, the items).
    steered: list[tuple[int, list[TResponseInputItem]]] = dataclasses.field(default_factory=list)


_ACTIVE: ContextVar[_Durable | None] = ContextVar("runqueue_openai_agents", default=None)
_KEY: ContextVar[str | None] = ContextVar("runqueue_openai_agents_key", default=None)


def idempotent_tool[T](tool: T) -> T:
    """Mark a tool safe to run again after a crash (``Idempotency.IDEMPOTENT``):
    a call its worker died in runs again instead of ending ``uncertain``."""
    setattr(tool, _IDEMPOTENT_MARK, True)
    return tool


def idempotency_key() -> str | None:
    """Inside a tool a durable run calls: a key that is the same on every
    attempt of this call (hand it to the service the tool writes to); None
    elsewhere."""
    return _KEY.get()


class Runner:
    """``agents.Runner`` for a runqueue handler: the same arguments, plus
    ``ctx`` (the handler's context), ``idempotent`` (names of the tools safe
    to run again after a crash; the rest are non-idempotent), ``session``
    (default: the run's ``session_id`` as the conversation, a
    ``RunqueueSession``; None for none) and ``steer`` (how a message sent
    to steer the turn, ``on_busy="steer"``, reads as the user's words, given
    to the agent before its next model request; ``steps.steer_text`` by
    default, None to leave such messages for the session's next turn)."""

    @classmethod
    async def run(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext | AsyncRunContext,
        idempotent: Collection[str] = (),
        session: Any = "run",
        run_config: RunConfig | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        **kwargs: Any,
    ) -> RunResult:
        """Run the agent as steps of the run (an async handler, or any code on
        runqueue's loop)."""
        durable = _begin(ctx, idempotent, stream=False, steer=steer, kwargs=kwargs)
        with _active(durable):
            return await agents.Runner.run(
                starting_agent,
                input,
                session=_session(durable.ctx, session),
                run_config=_config(run_config, durable),
                **kwargs,
            )

    @classmethod
    def run_sync(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> RunResult | RunResultStreaming:
        """``run`` from a sync handler: the agent runs on runqueue's loop while
        the handler's thread waits (and cancels it if the run is cancelled).
        ``stream=True`` sends the text deltas to ``ctx.stream``."""
        if isinstance(ctx, AsyncRunContext):
            raise TypeError("run_sync is for a sync handler's RunContext; await Runner.run")
        if stream:
            return _block(ctx, _drained(starting_agent, input, ctx, kwargs))
        return _block(ctx, cls.run(starting_agent, input, ctx=ctx, **kwargs))

    @classmethod
    def run_streamed(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext | AsyncRunContext,
        idempotent: Collection[str] = (),
        session: Any = "run",
        run_config: RunConfig | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        **kwargs: Any,
    ) -> RunResultStreaming:
        """``agents.Runner.run_streamed`` as steps of the run: the text deltas
        of the outermost agent's responses go to ``ctx.stream`` as they
        arrive, the final response to the step's record. Iterate
        ``stream_events()`` (on runqueue's loop) to drive it."""
        durable = _begin(ctx, idempotent, stream=True, steer=steer, kwargs=kwargs)
        with _active(durable):  # the SDK's task copies the context here
            return agents.Runner.run_streamed(
                starting_agent,
                input,
                session=_session(durable.ctx, session),
                run_config=_config(run_config, durable),
                **kwargs,
            )


async def _drained(
    agent: agents.Agent[Any], agent_input: Any, ctx: RunContext, kwargs: dict[str, Any]
) -> RunResultStreaming:
    result = Runner.run_streamed(agent, agent_input, ctx=ctx, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def _begin(
    ctx: RunContext | AsyncRunContext,
    idempotent: Collection[str],
    stream: bool,
    steer: Callable[[JSON], str] | None,
    kwargs: dict[str, Any],
) -> _Durable:
    install()
    if isinstance(idempotent, str):
        raise TypeError("idempotent takes a collection of tool names, not one string")
    server_managed = any(
        kwargs.get(name)
        for name in ("previous_response_id", "conversation_id", "auto_previous_response_id")
    )
    return _Durable(
        ctx=on_loop.as_async(ctx),
        idempotent=frozenset(idempotent),
        stream=stream,
        steer=steer,
        server_managed=server_managed,
    )


@contextlib.contextmanager
def _active(durable: _Durable) -> Iterator[None]:
    token = _ACTIVE.set(durable)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def _config(given: RunConfig | dict[str, Any] | None, durable: _Durable) -> RunConfig:
    """The caller's RunConfig with function tools run one at a time, in the
    order the model asked for them: each call's step number then follows
    from the model's response alone, so a replay numbers them the same
    (calls run together would be numbered in the order they happen to start,
    and an agent used as a tool interleave its steps with its siblings');
    and, when the run reads steers, its ``call_model_input_filter`` (the
    SDK's hook right before each model call) with the steers put in first
    (``_steered_input``)."""
    run_config: RunConfig
    if given is None:
        run_config = RunConfig()
    elif isinstance(given, dict):
        run_config = RunConfig(**given)
    else:
        run_config = given
    execution = run_config.tool_execution or ToolExecutionConfig()
    run_config = dataclasses.replace(
        run_config,
        tool_execution=dataclasses.replace(execution, max_function_tool_concurrency=1),
    )
    if durable.steer is None:
        return run_config
    given_filter = run_config.call_model_input_filter

    async def steered(data: CallModelData[Any]) -> ModelInputData:
        data.model_data = await _steered_input(durable, data.model_data)
        if given_filter is None:
            return data.model_data
        filtered = given_filter(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    return dataclasses.replace(run_config, call_model_input_filter=steered)


async def _steered_input(durable: _Durable, model_data: ModelInputData) -> ModelInputData:
    """The input of the next model request with the steers in it: those
    read now (``ctx.steers()``, a step, so a replay reads the same ones at
    the same point) as user messages at its end, and those read before
    where they were read (the SDK builds each request's input from the run's
    items, which hold no steer: they are put back each time, so the
    conversation keeps them, each once). An agent running as another's tool
    reads none: its caller's requests do."""
    if _ACTIVE.get() is not durable or durable.steer is None:
        return model_data
    given = list(model_data.input)
    taken = await durable.ctx.steers()
    if taken:
        to_text = durable.steer
        items: list[TResponseInputItem] = [
            {"role": "user", "content": to_text(payload)} for payload in taken
        ]
        durable.steered.append((len(given), items))
    groups = durable.steered
    if durable.server_managed:  # the server holds those sent with earlier requests
        groups = groups[-1:] if taken else []
    out: list[TResponseInputItem] = []
    at = 0
    for anchor, items in groups:
        anchor = min(max(anchor, at), len(given))  # a handoff's filter may shorten it
        out += [*given[at:anchor], *items]
        at = anchor
    out += given[at:]
    return ModelInputData(input=out, instructions=model_data.instructions)


def _session(ctx: AsyncRunContext, session: Any) -> Any:
    if isinstance(session, str) and session == "run":
        session_id = ctx.run.session_id
        return RunqueueSession(ctx) if session_id else None
    return session


def _block[T](ctx: RunContext, coro: Awaitable[T]) -> T:
    """Run ``coro`` on runqueue's loop and wait for it on the handler's
    thread; a cancelled run cancels it (RunCancelled)."""
    if aio.loop() is _running_loop():
        raise RuntimeError("run_sync cannot wait on runqueue's own loop: await Runner.run")

    async def wrapped() -> T:
        return await coro

    future = aio.run(wrapped())
    finished = threading.Event()
    future.add_done_callback(lambda _: finished.set())
    while not finished.wait(0.2):
        if ctx.cancelled.is_set():
            future.cancel()
            break
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        ctx.check()
        raise


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# --- The record of one model request -------------------------------------


def _jsonable(value: Any) -> JSON:
    """A value as JSON the way pydantic dumps it (by alias), for hashing and records."""
    dumped: JSON = pydantic_core.to_jsonable_python(value, by_alias=True, fallback=str)
    return dumped


def _without_ids(items: JSON) -> JSON:
    """Input items without their ``id`` members: an item's identity is not
    what the request asks (call ids, which tie outputs to calls, stay)."""
    if isinstance(items, list):
        return [
            {k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) else item
            for item in items
        ]
    return items


def _tool_definition(tool: Any) -> JSON:
    if isinstance(tool, FunctionTool):
        return {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": _jsonable(tool.params_json_schema),
            "strict": tool.strict_json_schema,
        }
    # A hosted tool (web search, file search, ...): the model runs it inside the request.
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def _request(
    model: str,
    system_instructions: str | None,
    items: str | list[TResponseInputItem],
    model_settings: Any,
    tools: list[Any],
    output_schema: Any,
    handoffs: list[Any],
    prompt: Any,
) -> dict[str, JSON]:
    """What a model request asks, deterministically: no ids, no timestamps."""
    schema: JSON = None
    if output_schema is not None and not output_schema.is_plain_text():
        schema = {"name": output_schema.name(), "schema": _jsonable(output_schema.json_schema())}
    return {
        "model": model,
        "instructions": system_instructions,
        "input": _without_ids(_jsonable(items)),
        "settings": _jsonable(model_settings.to_json_dict()),
        "tools": [_tool_definition(tool) for tool in tools],
        "handoffs": [
            {
                "name": handoff.tool_name,
                "description": handoff.tool_description,
                "parameters": _jsonable(handoff.input_json_schema),
            }
            for handoff in handoffs
        ],
        "output_schema": schema,
        "prompt": _jsonable(prompt),
    }


def _step_response(model: str, response: ModelResponse) -> steps.ModelResponse:
    """The step's record of an SDK response: the SDK's own serialization as
    ``raw`` (what a replay validates back), the rest for people."""
    text = "".join(
        ItemHelpers.extract_last_text(item) or ""
        for item in response.output
        if isinstance(item, ResponseOutputMessage)
    )
    calls: list[dict[str, JSON]] = [
        {"name": item.name, "arguments": item.arguments, "call_id": item.call_id}
        for item in response.output
        if isinstance(item, ResponseFunctionToolCall)
    ]
    return steps.ModelResponse(
        model=model,
        # exclude_unset: the items validate back as they were, the fields their
        # provider left out still unset, so the SDK builds the next request
        # from a replayed response exactly as from the live one.
        raw=_RESPONSE.dump_python(response, mode="json", by_alias=True, exclude_unset=True),
        text=text,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
    )


async def _model_step(
    durable: _Durable,
    model: str,
    request: dict[str, JSON],
    send: Callable[[], Awaitable[steps.ModelResponse]],
) -> ModelResponse:
    """One model request as the run's next step; its SDK response."""
    ctx = durable.ctx
    seq = ctx.sync._seq  # the number model_request's invoke_tool takes, before any await
    try:
        raw = await steps.model_request(ctx, model=model, request=request, send=send)
    except PermanentError as exc:
        recorded = await aio.db(_recorded_call, ctx.lease.run_id, seq)
        summary = {
            "model": model,
            "tools": _names(request["tools"]),
            "handoffs": _names(request["handoffs"]),
            "input_items": len(request["input"]) if isinstance(request["input"], list) else 1,
            "request_sha256": payload_digest(request),
        }
        raise PermanentError(
            f"model request #{seq} does not match the run's record: recorded {recorded}, "
            f"now {steps.step_name(model)} {json.dumps(summary)} ({exc})"
        ) from exc
    return _RESPONSE.validate_python(raw)


def _names(definitions: JSON) -> list[JSON]:
    if not isinstance(definitions, list):
        return []
    return [d.get("name") for d in definitions if isinstance(d, dict)]


def _recorded_call(run_id: uuid.UUID, seq: int) -> str:
    row = ToolInvocation.objects.filter(run_id=run_id, seq=seq).values("tool", "arguments").first()
    return "nothing" if row is None else f"{row['tool']} {json.dumps(row['arguments'])}"


def _model_name(model: Model) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


class DurableModel(Model):
    """The SDK's model, each request a step of the run while a durable run
    is active (and the model itself otherwise)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = _model_name(model)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs)
        options = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        durable = _ACTIVE.get()
        if durable is None:
            return await self.model.get_response(*args, tracing, **options)
        request = _request(self.name, *args, prompt)

        async def send() -> steps.ModelResponse:
            response = await self.model.get_response(*args, tracing, **options)
            return _step_response(self.name, response)

        return await _model_step(durable, self.name, request, send)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        """The model's events as they arrive (text deltas to ``ctx.stream``
        too); a replayed request yields only its completed response."""
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs)
        options = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        durable = _ACTIVE.get()
        if durable is None:
            async for event in self.model.stream_response(*args, tracing, **options):
                yield event
            return
        request = _request(self.name, *args, prompt)
        events: asyncio.Queue[Any] = asyncio.Queue()

        async def send() -> steps.ModelResponse:
            completed: Response | None = None
            output: list[Any] = []
            async for event in self.model.stream_response(*args, tracing, **options):
                events.put_nowait(event)
                if isinstance(event, ResponseTextDeltaEvent) and durable.stream and event.delta:
                    await durable.ctx.stream(event.delta)
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    output.append(event.item)
                elif isinstance(event, ResponseCompletedEvent):
                    completed = event.response
            if completed is None:
                raise agents.ModelBehaviorError("the model's stream ended without a response")
            response = ModelResponse(
                output=list(completed.output) or output,
                usage=_usage(completed.usage),
                response_id=completed.id,
            )
            return _step_response(self.name, response)

        step = asyncio.ensure_future(_model_step(durable, self.name, request, send))
        live = False
        try:
            while not step.done() or not events.empty():
                if events.empty():
                    waiter = asyncio.ensure_future(events.get())
                    await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    event = waiter.result()
                else:
                    event = events.get_nowait()
                live = True
                yield event
            response = step.result()
        finally:
            if not step.done():
                step.cancel()
        if not live:
            yield _completed_event(self.name, response)

    async def close(self) -> None:
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.model._cleanup_on_run_end(owner)

    def get_retry_advice(self, request: Any) -> Any:
        return self.model.get_retry_advice(request)


def _usage(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=usage.input_tokens_details,
        output_tokens_details=usage.output_tokens_details,
    )


def _completed_event(model: str, response: ModelResponse) -> ResponseCompletedEvent:
    """A replayed response as the event a stream ends with."""
    usage = response.usage
    return ResponseCompletedEvent(
        type="response.completed",
        sequence_number=0,
        response=Response(
            id=response.response_id or "",
            created_at=0,
            model=model,
            object="response",
            output=response.output,
            tool_choice="auto",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
            status="completed",
            usage=ResponseUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_details=InputTokensDetails.model_validate(
                    usage.input_tokens_details.model_dump()
                ),
                output_tokens_details=OutputTokensDetails.model_validate(
                    usage.output_tokens_details.model_dump()
                ),
            ),
        ),
    )


# --- Function tools --------------------------------------------------------


class ToolErrorOutput(Exception):  # noqa: N818 - what the model read, recorded as the failure
    """A tool failed and the SDK turned the failure into the text the model
    reads (its ``failure_error_function``): recorded as the call's failure,
    replayed as that text."""


def _arguments(arguments: str) -> dict[str, JSON]:
    """The model's arguments as the step's arguments (a JSON object); text
    that is not one is kept whole, for the tool to refuse as it would."""
    try:
        parsed = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_arguments": arguments}


def _argument_text(args: dict[str, JSON]) -> str:
    if set(args) == {"_arguments"} and isinstance(args["_arguments"], str):
        return args["_arguments"]
    return json.dumps(args)


def _recordable(output: Any) -> JSON:
    """A tool's output as recorded and as the SDK is handed it, live and on
    replay alike: itself when it is JSON, else what the model would read."""
    try:
        if json.loads(json.dumps(output)) == output:
            recorded: JSON = output
            return recorded
    except (TypeError, ValueError):
        pass
    return _jsonable(ItemHelpers._convert_tool_output(output))


async def _needs_approval(tool: FunctionTool, context: Any, args: dict[str, JSON]) -> bool:
    setting = tool.needs_approval
    if isinstance(setting, bool):
        return setting
    decided: Any = setting(context, args, getattr(context, "tool_call_id", ""))
    if isinstance(decided, Awaitable):
        decided = await decided
    return bool(decided)


async def _durable_tool(
    durable: _Durable,
    invoke: Callable[..., Awaitable[Any]],
    tool: FunctionTool,
    context: Any,
    arguments: str,
) -> Any:
    """One function tool call as ``ctx.invoke_tool``; the SDK's invocation
    result (its output, and whether the SDK made it from a failure)."""
    from agents.tool import _FunctionToolInvocationResult

    if getattr(tool, "_is_agent_tool", False):
        # An agent used as a tool: its own model requests and tool calls are
        # the run's steps (a crash in the middle replays the finished ones),
        # so the call itself is not one. Its text is not the run's stream.
        if await _needs_approval(tool, context, _arguments(arguments)):
            # The person's decision is a step of its own, before the agent runs.
            gate: ToolOutcome = await durable.ctx.invoke_tool(
                tool.name,
                _approved,
                args=_arguments(arguments),
                idempotency=Idempotency.IDEMPOTENT,
                approval=True,
            )
            if gate.status != "completed":
                return _FunctionToolInvocationResult(*_tool_output(tool.name, gate))
            value = gate.value
            if not (isinstance(value, dict) and set(value) == {"approved"}):
                return _FunctionToolInvocationResult(value)  # a person's response stands for it
            approved = value["approved"]
            arguments = _argument_text(approved if isinstance(approved, dict) else {})
        token = _ACTIVE.set(dataclasses.replace(durable, stream=False))
        try:
            return await invoke(function_tool=tool, context=context, arguments=arguments)
        finally:
            _ACTIVE.reset(token)

    args = _arguments(arguments)
    idempotency = (
        Idempotency.IDEMPOTENT
        if tool.name in durable.idempotent or getattr(tool, _IDEMPOTENT_MARK, False)
        else Idempotency.NON_IDEMPOTENT
    )
    options: dict[str, Any] = {}
    if await _needs_approval(tool, context, args):
        options["approval"] = True

    async def call(idempotency_key: str, **call_args: JSON) -> JSON:
        token = _KEY.set(idempotency_key)
        try:
            result = await invoke(
                function_tool=tool, context=context, arguments=_argument_text(call_args)
            )
        finally:
            _KEY.reset(token)
        output = _recordable(result.output)
        if result.is_sdk_generated_error:
            raise ToolErrorOutput(output if isinstance(output, str) else json.dumps(output))
        return output

    outcome: ToolOutcome = await durable.ctx.invoke_tool(
        tool.name, call, args=args, idempotency=idempotency, **options
    )
    return _FunctionToolInvocationResult(*_tool_output(tool.name, outcome))


def _approved(**arguments: JSON) -> JSON:
    """An agent tool's approval step: the arguments it runs with (edited or not)."""
    return {"approved": dict(arguments)}


def _tool_output(tool: str, outcome: ToolOutcome) -> tuple[Any, bool]:
    """What the model reads for a call's outcome, and whether it stands for a failure."""
    error = outcome.error if isinstance(outcome.error, dict) else {}
    message = str(error.get("message") or "")
    if outcome.status == "completed":
        return outcome.value, False
    if outcome.status == "failed":
        if error.get("type") == ToolErrorOutput.__name__:
            return message, True
        raise ToolFailed(f"{tool} failed: {error.get('type')}: {message}")
    if outcome.status == "uncertain":
        reason = message or "its worker was lost"
        return UNCERTAIN_OUTPUT.format(tool=tool, reason=reason), True
    status: str = outcome.status  # "rejected" comes with approvals (ctx.invoke_tool(approval=))
    if status == "rejected":
        return message or DEFAULT_APPROVAL_REJECTION_MESSAGE, True
    raise RunCancelled(tool, "fenced")


class ToolFailed(Exception):  # noqa: N818 - the SDK's own word for it is an error
    """A tool whose failure the SDK raises rather than tell the model
    (``failure_error_function=None``), replayed as its record says."""


# --- The SDK's seams -------------------------------------------------------

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Wrap the SDK's seams once (idempotent; inert outside a durable run).
    ImportError if this SDK version does not have them."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from agents.run_internal import run_loop, tool_execution

        try:
            get_model = run_loop.get_model
            invoke = tool_execution._invoke_function_tool_with_metadata
            evaluate = tool_execution.evaluate_function_tool_approval
            from agents._function_tool_arguments import FunctionToolApproval
        except AttributeError as exc:
            raise ImportError(
                f"openai-agents {agents.__version__} is not supported by "
                "runqueue.contrib.openai_agents (it needs >=0.24,<0.25)"
            ) from exc

        def durable_get_model(agent: Any, run_config: Any) -> Any:
            model = get_model(agent, run_config)
            if _ACTIVE.get() is None or isinstance(model, DurableModel):
                return model
            return DurableModel(model)

        async def durable_invoke(*, function_tool: Any, context: Any, arguments: str) -> Any:
            durable = _ACTIVE.get()
            if durable is None:
                return await invoke(
                    function_tool=function_tool, context=context, arguments=arguments
                )
            return await _durable_tool(durable, invoke, function_tool, context, arguments)

        async def durable_evaluate(
            function_tool: Any, context: Any, arguments: str, call_id: str, **kwargs: Any
        ) -> Any:
            if _ACTIVE.get() is None:
                return await evaluate(function_tool, context, arguments, call_id, **kwargs)
            # runqueue decides approvals (ctx.invoke_tool(approval=...)): never the SDK.
            return FunctionToolApproval(
                "invoke", function_tool, function_tool.on_invoke_tool, arguments
            )

        run_loop.get_model = durable_get_model
        tool_execution._invoke_function_tool_with_metadata = durable_invoke
        tool_execution.evaluate_function_tool_approval = durable_evaluate
        _installed = True


# --- The run's session as the SDK's conversation ---------------------------


class RunqueueSession(SessionABC):
    """The run's ``session_id`` as the SDK's conversation memory, without a
    table of its own: each ``add_items`` is a step of the run (tool
    ``openai_agents.session``, its result the items), so a replay writes
    nothing twice and a fenced worker nothing at all; ``get_items`` reads
    the steps of the session's earlier runs, in the order they were
    written, and this run's steps before the current one (what a replay
    reads is what the first attempt read). A run the session rolled back
    (``on_busy="rollback"``) is not part of it."""

    def __init__(self, ctx: RunContext | AsyncRunContext, session_id: str | None = None) -> None:
        self.ctx = on_loop.as_async(ctx)
        self.session_id = session_id or self.ctx.run.session_id or ""
        if not self.session_id:
            raise ValueError("RunqueueSession needs a session_id: the run has none")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        items = await aio.db(_session_items, self.ctx.run, self.session_id, self.ctx.sync._seq)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._record({"op": "add", "items": _jsonable(items)})

    async def pop_item(self) -> TResponseInputItem | None:
        items = await self.get_items()
        if not items:
            return None
        await self._record({"op": "pop"})
        return items[-1]

    async def clear_session(self) -> None:
        await self._record({"op": "clear"})

    async def _record(self, entry: dict[str, JSON]) -> None:
        outcome = await self.ctx.invoke_tool(
            SESSION_STEP,
            lambda **_step: entry,
            args={"op": entry["op"], "sha256": payload_digest(entry)},
            idempotency=Idempotency.IDEMPOTENT,
        )
        if outcome.status == "fenced":
            raise RunCancelled(self.ctx.lease.run_id, self.ctx.lease.cancel_reason or "fenced")
        if outcome.status != "completed":
            raise RuntimeError(
                f"session step #{outcome.seq} ended {outcome.status}: {outcome.error}"
            )


def _session_items(run: Run, session_id: str, before_seq: int) -> list[Any]:
    """The session's items: every session step of its other runs (except
    rolled-back ones) and of this one before ``before_seq``, folded in the
    order they were written (one run of a session is active at a time)."""
    from django.db.models import Q

    rolled_back = Run.objects.filter(
        tenant=run.tenant,
        session_id=session_id,
        status=RunStatus.CANCELLED,
        failure__reason="rolled_back",
    ).values("id")
    records = (
        ToolInvocation.objects.filter(
            run__tenant=run.tenant,
            run__session_id=session_id,
            tool=SESSION_STEP,
            status=ToolStatus.COMPLETED,
        )
        .filter(~Q(run_id=run.id) | Q(seq__lt=before_seq))
        .exclude(run_id__in=rolled_back)
        .order_by("created_at", "run_id", "seq")
        .values_list("result", flat=True)
    )
    items: list[Any] = []
    for entry in records:
        if not isinstance(entry, dict):
            continue
        if entry.get("op") == "add" and isinstance(entry.get("items"), list):
            items.extend(entry["items"])
        elif entry.get("op") == "pop" and items:
            items.pop()
        elif entry.get("op") == "clear":
            items.clear()
    return items
