"""A user's handler module, registered through RUNQUEUE["HANDLER_MODULES"]."""

import runqueue


@runqueue.handler("reuse.hello")
def hello(ctx: runqueue.RunContext) -> dict:
    greeting = ctx.invoke_tool(
        "greet", lambda name: f"hello {name}", args={"name": ctx.payload["name"]}
    )
    return {"greeting": greeting.value}
