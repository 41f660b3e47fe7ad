"""The next deploy of tests/agents/killed_agents.py: the ``deploy`` kinds
at versions 1 (imported) and 2, whose agent has one more tool
(``notify_customer``) and which takes version 1's runs over between turns."""

from __future__ import annotations

from tests.agents.killed_agents import KINDS, oa_agent, oa_handler, pai_agent, pai_handler

pai_handler(
    KINDS["deploy"]["pydantic_ai"],
    pai_agent(approval=True, extra=True),
    version=2,
    migrate_from=(1,),
)
oa_handler(
    KINDS["deploy"]["openai_agents"],
    oa_agent(approval=True, extra=True),
    version=2,
    migrate_from=(1,),
)
