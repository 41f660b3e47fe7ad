"""Adapters that run agents written with other SDKs durably on runqueue
(``runqueue.contrib.pydantic_ai``, ``runqueue.contrib.openai_agents``), and
the step record they share (``runqueue.contrib.steps``). Each adapter needs
its SDK, an optional extra; nothing else in the package imports them."""
