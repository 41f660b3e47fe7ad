"""Type names shared by runqueue's annotations."""

from collections.abc import Mapping
from typing import Any

#: A JSON value: a run's payload, input, result or failure, an event's data,
#: a problem's extensions. What ``json.loads`` returns and a JSONField holds;
#: ``Any`` because each reader checks the shape it needs at run time. The
#: name marks the one kind of ``Any`` runqueue's annotations mean.
type JSON = Any

#: The named parameters of a statement from runqueue/sql/. Values are what
#: psycopg adapts (``Jsonb`` included), so wider than any one column type.
type Params = Mapping[str, object]
