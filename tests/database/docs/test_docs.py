"""The docs say what is true: every ```python block of README.md and
docs/**/*.md runs against the test database (its runs then run too, as a
worker would run them), every shell block names commands that exist, every
link and admin or API path leads somewhere, and the package map in
docs/decisions.md names every module of runqueue/ and only modules that
exist. No page is longer than a maintainer reads (800 lines).

A python block a test of its own runs is marked ``<!-- name -->`` (that test
names it); one that cannot run says so with ```python no-run, and there are
few."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
import types
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import get_commands
from django.urls import Resolver404, resolve

import runqueue
from runqueue import conf, leases, registry, testing
from runqueue.models import Run
from runqueue.runtime import aio
from tests.database.docs.docs_blocks import REPO, Block, all_blocks, doc_files

#: Fence languages the docs use; a block without one is an error.
LANGUAGES = {"python", "sh", "text", "yaml", "json", "js"}
MAX_NO_RUN = 3
#: Kinds the examples submit without defining: a stand-in handler returns
#: the payload.
STAND_IN_KINDS = ("chat.turn", "research.page", "research.topic", "digest.send")


def _python_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.language == "python"]


def _tests_text() -> str:
    own = Path(__file__).resolve()
    return "\n".join(p.read_text() for p in (REPO / "tests").rglob("*.py") if p.resolve() != own)


def _runs_here(block: Block) -> bool:
    return block.info == "python" and block.name is None


RUN_HERE = [b for b in _python_blocks() if _runs_here(b)]


def test_every_block_has_a_known_language() -> None:
    for block in all_blocks():
        assert block.language in LANGUAGES, f"{block.where}: fence {block.info!r}"
        if block.language == "python":
            assert block.info in ("python", "python no-run"), f"{block.where}: {block.info!r}"


def test_a_named_python_block_is_run_by_a_test_that_names_it() -> None:
    tests = _tests_text()
    for block in _python_blocks():
        if block.name is not None:
            assert re.search(rf"""["']{block.name}["']""", tests), f"{block.where}: no test"


def test_few_python_blocks_are_not_run() -> None:
    no_run = [b.where for b in _python_blocks() if b.info == "python no-run"]
    assert len(no_run) <= MAX_NO_RUN, no_run
    assert len(RUN_HERE) >= 15  # the extraction found the docs' blocks


# --- Running the python blocks -------------------------------------------


class _Usage(SimpleNamespace):
    pass


class _Responses:
    """A model provider's client as the examples call it."""

    def create(self, *, model: str, input: Any, **options: Any) -> Any:  # noqa: A002
        return SimpleNamespace(
            output_text=f"an answer from {model}",
            usage=_Usage(input_tokens=1200, output_tokens=300, total_tokens=1500),
        )


class _AsyncModelClient:
    async def complete(self, prompt: str) -> str:
        return f"a reply to {prompt}"

    async def aclose(self) -> None:
        pass


class _RateLimitError(Exception):
    response = SimpleNamespace(headers={"retry-after": "1"})


def _stand_ins() -> dict[str, Any]:
    """What the examples call but leave to the reader's project."""
    return {
        "lookup_order": lambda id: {"order": id, "total": 40},  # noqa: A006
        "refund": lambda order, idempotency_key: {"refunded": order, "key": idempotency_key},
        "search": lambda query: {"hits": 3, "query": query},
        "model": lambda messages, found: " / ".join(messages),
        "client": SimpleNamespace(responses=_Responses()),
        "openai": SimpleNamespace(RateLimitError=_RateLimitError),
        "done": lambda reply: True,
        "AsyncModelClient": _AsyncModelClient,
        "fetch_weather": lambda city: {"summary": f"light rain in {city}"},
        "runqueue": runqueue,  # every example of a guide has imported it
        "Idempotency": runqueue.Idempotency,
        "urls": ["https://example.com/a", "https://example.com/b"],
    }


def _defined_kinds(code: str) -> set[str]:
    return set(re.findall(r"""@runqueue\.handler\(\s*["']([^"']+)["']""", code))


def _stand_in(ctx: Any) -> Any:
    return ctx.payload


@pytest.fixture
def docs_registry(block: Block) -> Iterator[None]:
    """The block's kinds registered by the block alone (another module's
    handler of the same kind stands aside), stand-ins for the kinds it only
    submits, and the registry (its event triggers too) as it was afterwards."""
    saved = {kind: dict(versions) for kind, versions in registry._handlers.items()}
    triggers = list(registry._triggers)
    defined = _defined_kinds(block.code)
    for kind in defined:
        registry.unregister(kind)
    for kind in set(STAND_IN_KINDS) - defined:
        if not registry.is_registered(kind):
            registry.handler(kind)(_stand_in)
    try:
        yield
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)
        registry._triggers[:] = triggers  # a block's @runqueue.on_event goes with it
        registry._served = None  # built again from the registry as it was
        aio.close_connections()


def _module_for(block: Block) -> types.ModuleType:
    """A module of the block's own, so what it defines has an importable
    path (a ``django.tasks`` task is found by its module)."""
    slug = re.sub(r"\W", "_", block.where)
    module = types.ModuleType(f"docs_example_{slug}")
    module.__dict__.update(_stand_ins())
    return module


def _run(block: Block, settings: Any) -> None:
    """Each top-level statement in turn; a ``RUNQUEUE = {...}`` is put in
    force (and checked) before the next one, as settings.py would be."""
    module = _module_for(block)
    sys.modules[module.__name__] = module
    try:
        tree = ast.parse(block.code, filename=block.where)
        for statement in tree.body:
            code = compile(ast.Module([statement], []), block.where, "exec")
            exec(code, module.__dict__)  # noqa: S102 - our own docs
            if any(getattr(t, "id", None) == "RUNQUEUE" for t in _targets(statement)):
                settings.RUNQUEUE = {**django_settings.RUNQUEUE, **module.RUNQUEUE}
                conf.get_settings()  # ImproperlyConfigured if the docs' dict is wrong
        _drain(block)
    finally:
        del sys.modules[module.__name__]


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, ast.AnnAssign):
        return [statement.target]
    return []


def _drain(block: Block) -> None:
    """Run what the block left due, as a worker would, until nothing is."""
    for _ in range(50):
        lease = leases.claim_one("docs")
        if lease is None:
            return
        outcome = testing.execute(lease)
        failure = Run.objects.get(id=lease.run_id).failure
        assert outcome != "failed", f"{block.where}: a run failed: {failure}"
    pytest.fail(f"{block.where}: runs still due after 50 claims")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("block", RUN_HERE, ids=[b.where for b in RUN_HERE])
def test_the_python_block_runs(block: Block, docs_registry: None, settings: Any) -> None:
    _run(block, settings)


# --- Shell blocks -------------------------------------------------------

#: Programs a ``$(...)`` in an example may run: the project needs Python 3;
#: the rest are POSIX shell built-ins.
PORTABLE = {"python3", "printf", "echo"}
PROGRAMS = {"python", "python3", ".venv/bin/python", "pip", "curl", "gunicorn"}
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _commands(code: str) -> list[list[str]]:
    """Each command line of a shell block, continuations joined, comments,
    leading variable assignments and pipes' later stages left out."""
    found = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and ASSIGNMENT.match(words[0]):
            words.pop(0)
        if words:
            found.append(words)
    return found


def _management_commands() -> set[str]:
    """Django's, and those of the project's apps (chaos is installed only
    for its own command)."""
    found = [
        *REPO.glob("*/management/commands/*.py"),
        *REPO.glob("tools/*/management/commands/*.py"),
    ]
    ours = {p.stem for p in found if p.stem != "__init__"}
    return ours | set(get_commands())


def _sh_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.language == "sh"]


def test_shell_blocks_name_commands_that_exist() -> None:
    commands = _management_commands()
    for block in _sh_blocks():
        for words in _commands(block.code):
            program, args = words[0], words[1:]
            where = f"{block.where}: {' '.join(words)}"
            if program.startswith("./scripts/"):
                assert (REPO / program).is_file(), where
                continue
            assert program in PROGRAMS, where
            if program.endswith("python") and args[:1] == ["manage.py"]:
                assert args[1] in commands, where
            elif program.endswith("python") and args[:1] == ["-m"]:
                assert importlib.util.find_spec(args[1]) is not None, where
            elif program == "curl":
                url = next(a for a in args if a.startswith("http"))
                _resolves(url.split("8000", 1)[1], where)


def test_every_substituted_command_is_portable_and_runs() -> None:
    """``$(...)`` in a shell example runs on a plain machine (a fresh one has
    no ``uuidgen``: issue 37)."""
    found = [c for b in _sh_blocks() for c in _substitutions(b.code)]
    assert any("uuid4" in c for c in found), found  # the API's Idempotency-Key
    for command in found:
        program = shlex.split(command)[0]
        assert program in PORTABLE, f"{command!r}: {program} is not on every machine"
        done = subprocess.run(  # noqa: S603 - the docs' own examples
            ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command


def _substitutions(code: str) -> list[str]:
    found = []
    start = code.find("$(")
    while start >= 0:
        depth, end = 0, start + 1
        for end in range(start + 1, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                break
        found.append(code[start + 2 : end])
        start = code.find("$(", end)
    return found


def test_the_readme_s_two_commands_are_the_ones_ci_runs() -> None:
    readme = next(p for p in doc_files() if p.name == "README.md")
    shell = "".join(b.code for b in _sh_blocks() if b.path == readme)
    assert "./scripts/run.sh" in shell and "./scripts/test.sh" in shell
    assert "\n./scripts/test.sh " in (REPO / ".ci/run").read_text()


# --- Links and paths ------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Written beside these docs; checked once it is there.
SETTINGS_GUIDE = REPO / "docs/settings.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", lambda m: "_" if m.group() == "_" else "", heading)
    text = "".join(c for c in text.lower() if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_every_relative_link_leads_somewhere() -> None:
    for path in doc_files():
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if dest == SETTINGS_GUIDE and not dest.exists():
                continue
            assert dest.exists(), f"{path.name}: {target}"
            if anchor:
                assert anchor in _anchors(dest), f"{path.name}: {target}"


def _resolves(path: str, where: str) -> None:
    path = path.split("?", 1)[0]
    path = re.sub(r"<id>|3f0c\.\.\.", str(uuid.uuid4()), path)
    path = re.sub(r"<[^>]+>", "name", path)
    try:
        resolve(path)
    except Resolver404:
        pytest.fail(f"{where}: {path} is no URL of the project")


#: A page a maintainer reads whole: past this, split it by topic (the dated
#: measurements and the decisions' history live in docs/log/).
MAX_DOC_LINES = 800


def test_no_doc_is_longer_than_a_maintainer_reads() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in doc_files()
        if (lines := len(path.read_text().splitlines())) > MAX_DOC_LINES
    }
    assert long == {}, f"split these by topic: {long}"


def test_admin_and_api_paths_resolve() -> None:
    for path in doc_files():
        for found in re.findall(r"`((?:GET |POST )?/(?:admin|api)/[^`]+)`", path.read_text()):
            _resolves(re.sub(r"^(GET|POST) ", "", found), path.name)


# --- The map of the package -------------------------------------------------


def _package_map() -> str:
    text = (REPO / "docs/decisions.md").read_text()
    start = text.index("\n## The map of the package\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _top_level() -> set[str]:
    package = REPO / "runqueue"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in package.glob("*/__init__.py")}
    return {f"runqueue.{name}" for name in modules | packages}


def _named() -> set[str]:
    return set(re.findall(r"`(runqueue(?:\.\w+)+)", _package_map()))


def test_the_map_names_every_top_level_module() -> None:
    top = {".".join(name.split(".")[:2]) for name in _named()}
    assert _top_level() - top == set()


def test_the_package_root_holds_at_most_twelve_modules() -> None:
    """Everything else lives in a folder named for its concept (the map's
    folder table): a thirteenth module at the root is a new concept's
    first file, and belongs in a folder."""
    root = sorted(p.stem for p in (REPO / "runqueue").glob("*.py") if p.stem != "__init__")
    assert len(root) <= 12, root


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name below a module that is no package
        return False


def test_every_module_the_map_names_exists() -> None:
    """A name is a module, or a module's attribute (``runqueue.leases.claim_one``)."""
    for name in _named():
        module = name
        while not _is_module(module):
            module = module.rpartition(".")[0]
        value = importlib.import_module(module)
        for part in name[len(module) + 1 :].split(".") if module != name else []:
            assert hasattr(value, part), f"{name} is no module of runqueue, nor in one"
            value = getattr(value, part)


def test_the_map_has_each_step() -> None:
    text = _package_map().lower()
    steps = ("submit", "claim", "run a handler", "finish", "wait", "resume", "spawn", "join")
    steps += ("cancel", "fork", "retention", "schedules", "metrics", "stream", "admin", "api")
    for step in steps:
        assert f"| {step}" in text or f", {step}" in text or f"/{step}" in text, step
