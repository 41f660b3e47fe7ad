"""The next deploy of tests/agents/killed_agents.py: the ``deploy`` kinds
at versions 1 (imported) and 2, whose agent has one more tool
(``notify_customer``) and which takes version 1's runs over between turns."""

from __future__ import annotations

from tests.agents import killed_openai_agents, killed_pydantic_ai

for sdk in (killed_pydantic_ai, killed_openai_agents):
    sdk.handler(
        sdk.KINDS["deploy"][sdk.SDK],
        sdk.agent(approval=True, extra=True),
        version=2,
        migrate_from=(1,),
    )
