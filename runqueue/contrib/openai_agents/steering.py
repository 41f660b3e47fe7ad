"""Steering a running agent under the OpenAI Agents SDK: the messages sent
to steer the turn (``on_busy="steer"``) put into the input of each model
request through the run's ``call_model_input_filter`` (the SDK's public
hook right before each model call), each where it was read."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from agents import RunConfig
from agents.items import TResponseInputItem
from agents.run_config import CallModelData, ModelInputData

from runqueue.contrib import steps
from runqueue.contrib.openai_agents.durable import ACTIVE, Durable


def with_steers(run_config: RunConfig, durable: Durable) -> RunConfig:
    """``run_config`` with, when the run reads steers, its
    ``call_model_input_filter`` running after the steers are put in
    (``steered_input``)."""
    if durable.steer is None:
        return run_config
    given_filter = run_config.call_model_input_filter

    async def steered(data: CallModelData[Any]) -> ModelInputData:
        data.model_data = await steered_input(durable, data.model_data)
        if given_filter is None:
            return data.model_data
        filtered = given_filter(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    return dataclasses.replace(run_config, call_model_input_filter=steered)


async def steered_input(durable: Durable, model_data: ModelInputData) -> ModelInputData:
    """The input of the next model request with the steers in it: those
    read now (``ctx.steers()``, a step, so a replay reads the same ones at
    the same point) as user messages at its end, and those read before
    where they were read (the SDK builds each request's input from the run's
    items, which hold no steer: they are put back each time, so the
    conversation keeps them, each once). An agent running as another's tool
    reads none: its caller's requests do."""
    if ACTIVE.get() is not durable or durable.steer is None:
        return model_data
    given = list(model_data.input)
    texts = await steps.steer_texts(durable.ctx, durable.steer)
    if texts:
        items: list[TResponseInputItem] = [{"role": "user", "content": text} for text in texts]
        durable.steered.append((len(given), items))
    groups = durable.steered
    if durable.server_managed:  # the server holds those sent with earlier requests
        groups = groups[-1:] if texts else []
    out: list[TResponseInputItem] = []
    at = 0
    for anchor, items in groups:
        anchor = min(max(anchor, at), len(given))  # a handoff's filter may shorten it
        out += [*given[at:anchor], *items]
        at = anchor
    out += given[at:]
    return ModelInputData(input=out, instructions=model_data.instructions)
