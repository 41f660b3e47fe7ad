"""Adapters that run agents written with other SDKs durably on runqueue
(the packages ``runqueue.contrib.pydantic_ai`` and
``runqueue.contrib.openai_agents``), the step record they share
(``runqueue.contrib.steps``) and how they run an agent on runqueue's loop
(``runqueue.contrib.on_loop``). Each adapter needs its SDK, an optional
extra; nothing else in the package imports them."""
