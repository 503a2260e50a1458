"""The plugin registry, proved with real installed distributions.

The fixture distributions under ``tests/fixtures/plugins`` are installed with
pip into a private directory; each check runs a fresh Python (the real
``python -m agentkit`` or a short script) with that directory on
``PYTHONPATH``, so entry-point discovery is the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import click
import pytest

import agentkit
from agentkit import registry

pytestmark = pytest.mark.xdist_group("agentkit-plugin-fixtures")


def env_for(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def agentkit_cli(site: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=env_for(site, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


def plugins_json(site: Path, **extra: str) -> dict[str, Any]:
    proc = agentkit_cli(site, "plugins", **extra)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def run_script(site: Path, code: str, **extra: str) -> Any:
    """Run ``code`` in a fresh interpreter; it prints one JSON value as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env_for(site, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def by_name(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in entries}


def test_good_third_party_plugin_is_listed_with_distribution_and_version(site: Path) -> None:
    data = plugins_json(site)
    plugins = by_name(data["plugins"])
    good = plugins["fixture-good"]
    assert good == {
        "name": "fixture-good",
        "distribution": "agentkit-fixture-good",
        "version": "1.2.3",
        "module": "agentkit_fixture_good.plugin",
        "tasksets": ["fixture-numbers"],
        "harnesses": ["fixture-echo"],
        "rubrics": ["fixture-length"],
        "sandboxes": ["fixture-null"],
    }
    builtins = plugins["agentkit._builtins"]
    assert builtins["distribution"] == "agentkit"
    assert builtins["version"] == agentkit.__version__
    assert "jsonl" in builtins["tasksets"]


def test_broken_plugins_are_reported_with_distribution_and_reason(site: Path) -> None:
    data = plugins_json(site)
    failed = {f["name"]: f for f in data["failed"] if f["name"].startswith("fixture-")}
    loaded = by_name(data["plugins"])

    broken = failed["fixture-broken"]
    assert broken["distribution"] == "agentkit-fixture-broken"
    assert broken["error"] == "failed to import: RuntimeError: fixture plugin is broken on purpose"

    misspelled = failed["fixture-misspelled"]
    assert misspelled["distribution"] == "agentkit-fixture-misspelled"
    assert "unknown hook agentkit_register_harness " in misspelled["error"]
    assert "did you mean agentkit_register_harnesses?" in misspelled["error"]

    sync_run = failed["fixture-sync-run"]
    assert sync_run["distribution"] == "agentkit-fixture-badharness"
    assert "harness 'fixture-sync' is invalid" in sync_run["error"]
    assert "async def run" in sync_run["error"]

    bad_sig = failed["fixture-bad-signature"]
    assert bad_sig["distribution"] == "agentkit-fixture-badharness"
    assert "harness 'fixture-prompt' is invalid" in bad_sig["error"]
    assert "run(self, prompt" in bad_sig["error"]
    assert "run(self, task, context=None, on_event=None)" in bad_sig["error"]

    # None of the broken plugins counts as loaded; every good one still is.
    for name in (
        "fixture-broken",
        "fixture-misspelled",
        "fixture-sync-run",
        "fixture-bad-signature",
    ):
        assert name not in loaded
    assert {"fixture-good", "fixture-dup-a", "fixture-dup-b"} <= set(loaded)
    names = run_script(
        site,
        """
        import json
        from agentkit import registry
        print(json.dumps(registry.names("harness")))
        """,
    )
    assert {"fixture-echo", "fixture-only-a", "fixture-only-b"} <= set(names)
    assert not {"fixture-quiet", "fixture-sync", "fixture-prompt", "fixture-twin"} & set(names)


def test_duplicate_name_is_an_error_naming_both_distributions(site: Path) -> None:
    data = plugins_json(site)
    dup = [f for f in data["failed"] if "fixture-twin" in f["error"]]
    assert len(dup) == 1
    assert "agentkit-fixture-dup-a" in dup[0]["error"]
    assert "agentkit-fixture-dup-b" in dup[0]["error"]
    result = run_script(
        site,
        """
        import json
        from agentkit import registry, PluginError
        try:
            registry.resolve_harness("fixture-twin")
        except PluginError as exc:
            error = str(exc)
        only = [
            type(registry.resolve_harness(n)).__name__ for n in ("fixture-only-a", "fixture-only-b")
        ]
        print(json.dumps({"error": error, "only": only}))
        """,
    )
    assert "'fixture-twin'" in result["error"]
    assert "agentkit-fixture-dup-a" in result["error"]
    assert "agentkit-fixture-dup-b" in result["error"]
    assert "AGENTKIT_DISABLE_PLUGINS" in result["error"]
    assert result["only"] == ["Uniquea", "Uniqueb"]


def test_agentkit_plugins_restricts_loading(site: Path) -> None:
    data = plugins_json(site, AGENTKIT_PLUGINS="fixture-good,agentkit-fixture-dup-b,nosuch")
    loaded = set(by_name(data["plugins"]))
    assert loaded == {"agentkit._builtins", "fixture-good", "fixture-dup-b"}
    failed = by_name(data["failed"])
    assert "fixture-broken" not in failed
    assert failed["nosuch"]["distribution"] == "(not installed)"
    assert "AGENTKIT_PLUGINS" in failed["nosuch"]["error"]


def test_agentkit_disable_plugins_blocks(site: Path) -> None:
    data = plugins_json(
        site,
        AGENTKIT_DISABLE_PLUGINS="fixture-broken, agentkit-fixture-dup-b,fixture-misspelled",
    )
    loaded = set(by_name(data["plugins"]))
    failed = {f["name"] for f in data["failed"]}
    assert "fixture-dup-b" not in loaded
    assert not {"fixture-broken", "fixture-misspelled"} & failed
    assert "fixture-good" in loaded
    # Without the second distribution the name is no longer contested.
    output = run_script(
        site,
        """
        import asyncio, json
        from agentkit import registry, Task
        harness = registry.resolve_harness("fixture-twin")
        result = asyncio.run(harness.run(Task(task_id="t:1", input="x")))
        print(json.dumps(result.output))
        """,
        AGENTKIT_DISABLE_PLUGINS="agentkit-fixture-dup-b",
    )
    assert output == "a"


def test_unknown_name_says_what_is_installed(site: Path) -> None:
    result = run_script(
        site,
        """
        import json
        from agentkit import registry, UnknownNameError
        out = {}
        for kind, name in [("harness", "nosuch"), ("harness", "fixture-ecko"), ("taskset", "csv")]:
            try:
                registry.get(kind, name)
            except UnknownNameError as exc:
                out[name] = str(exc)
        out["installed"] = registry.names("harness")
        print(json.dumps(out))
        """,
    )
    installed = ", ".join(result["installed"])
    assert result["nosuch"] == f"unknown harness 'nosuch'; installed: {installed}"
    assert "fixture-echo" in installed
    assert result["fixture-ecko"].endswith("Did you mean 'fixture-echo'?")
    assert result["csv"].startswith("unknown taskset provider 'csv'; installed: ")
    assert "jsonl" in result["csv"] and "fixture-numbers" in result["csv"]


def test_unknown_name_notes_installed_plugins_left_out_by_the_environment(site: Path) -> None:
    """A name missing because AGENTKIT_PLUGINS/AGENTKIT_DISABLE_PLUGINS left its plugin out
    must say so; "installed: ..." alone sends people to reinstall what is installed."""
    code = """
        import json
        from agentkit import registry, UnknownNameError
        try:
            registry.get("harness", "fixture-echo")
        except UnknownNameError as exc:
            print(json.dumps(str(exc)))
        """
    blocked = run_script(site, code, AGENTKIT_DISABLE_PLUGINS="fixture-good")
    assert blocked.startswith("unknown harness 'fixture-echo'; installed: ")
    assert "Note: installed but not loaded: " in blocked
    assert "agentkit-fixture-good (AGENTKIT_DISABLE_PLUGINS blocks it)" in blocked
    only = run_script(site, code, AGENTKIT_PLUGINS="fixture-dup-a")
    assert "agentkit-fixture-good (AGENTKIT_PLUGINS does not name it)" in only


@pytest.mark.parametrize(
    ("kind", "name", "distribution"),
    [
        ("taskset", "harbor", "agentkit-harbor"),
        ("harness", "oracle", "agentkit-harbor"),
        ("harness", "nop", "agentkit-harbor"),
        ("harness", "opencode", "agentkit-opencode"),
        ("harness", "mini-swe-agent", "agentkit-mini-swe-agent"),
        ("harness", "codex", "agentkit-codex"),
        ("harness", "claude-code", "agentkit-claude-code"),
        ("taskset", "fleet", "agentkit-fleet"),
        ("harness", "fleet-tool-call", "agentkit-fleet"),
        ("harness", "terminal", "agentkit-terminal"),
    ],
)
def test_first_party_names_say_which_distribution_to_install(
    site: Path, kind: str, name: str, distribution: str
) -> None:
    # Only the fixture plugin loads, so the first-party plugins are absent even if installed.
    message = run_script(
        site,
        f"""
        import json
        from agentkit import registry, UnknownNameError
        try:
            registry.get({kind!r}, {name!r})
        except UnknownNameError as exc:
            print(json.dumps(str(exc)))
        """,
        AGENTKIT_PLUGINS="fixture-good",
    )
    assert message.startswith(f"unknown {'harness' if kind == 'harness' else 'taskset provider'} ")
    assert f"'{name}' is provided by the {distribution} distribution" in message
    assert f"pip install {distribution}" in message


def test_resolve_by_name_with_typed_options(site: Path) -> None:
    result = run_script(
        site,
        """
        import asyncio, json
        from agentkit import registry, Task, OptionError
        harness = registry.resolve_harness("fixture-echo", prefix=">", repeat=2)
        out = asyncio.run(harness.run(Task(task_id="t:1", input="ab"))).output
        taskset = registry.resolve_taskset("fixture-numbers:nums", count=2)
        errors = []
        for kwargs in ({"repeat": "2"}, {"loud": "true"}, {"bogus": 1}):
            try:
                registry.resolve_harness("fixture-echo", **kwargs)
            except OptionError as exc:
                errors.append(str(exc))
        sandbox = registry.resolve_sandbox("fixture-null", slots=2)
        print(json.dumps({
            "output": out,
            "tasks": [t.task_id for t in taskset],
            "errors": errors,
            "sandbox": sandbox.keywords,
            "rubric": registry.get("rubric", "fixture-length").description,
        }))
        """,
    )
    assert result["output"] == ">abab"
    assert result["tasks"] == ["nums:0", "nums:1"]
    assert result["errors"][0] == (
        "option 'repeat' for harness 'fixture-echo': expected int, got str '2'"
    )
    assert result["errors"][1] == (
        "option 'loud' for harness 'fixture-echo': expected bool, got str 'true'"
    )
    assert result["errors"][2].startswith(
        "unknown option 'bogus' for harness 'fixture-echo'; its options are: prefix (str), "
        "repeat (int), loud (bool), scale (float)"
    )
    assert result["sandbox"] == {"slots": 2}
    assert result["rubric"] == "Scores the length of the output (fixture)."


def test_import_agentkit_loads_no_entry_point(site: Path) -> None:
    modules = run_script(
        site,
        """
        import json, sys
        import agentkit
        print(json.dumps(sorted(sys.modules)))
        """,
    )
    assert not [m for m in modules if m.startswith("agentkit_fixture_")]
    assert "agentkit._plugins" not in modules
    assert "agentkit._builtins" not in modules


# In-process checks of registration rules, with real plugin objects loaded by
# the real loader (registry.reset(plugin_modules=...)), restored afterwards.


@pytest.fixture
def fresh_registry() -> Any:
    yield registry.reset
    registry.reset()


def _plugin(**hooks: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        **{name: agentkit.hookimpl(fn) for name, fn in hooks.items()},
    )


class _GoodHarness:
    """A fine harness."""

    name = "inproc-good"

    async def run(self, task: Any, context: Any = None, on_event: Any = None) -> Any:
        return None


def test_registration_checks_each_kind(fresh_registry: Any) -> None:
    def no_argument() -> None:
        return None

    class NoRoot:
        def __init__(self, *, hints: Any, rollout_id: str) -> None:
            pass

    plugins = [
        (
            "p-taskset",
            _plugin(agentkit_register_tasksets=lambda register: register(no_argument, name="t")),
            "d-t",
            "1",
        ),
        (
            "p-sandbox",
            _plugin(agentkit_register_sandboxes=lambda register: register(NoRoot, name="s")),
            "d-s",
            "1",
        ),
        (
            "p-noname",
            _plugin(agentkit_register_harnesses=lambda register: register(object())),
            "d-n",
            "1",
        ),
        (
            "p-good",
            _plugin(agentkit_register_harnesses=lambda register: register(_GoodHarness)),
            "d-g",
            "1",
        ),
        (
            "p-core",  # would write core.* metrics, as if the taskset had defined them
            _plugin(agentkit_register_rubrics=lambda register: register(no_argument, name="core")),
            "d-c",
            "1",
        ),
    ]
    reg = fresh_registry(plugins)
    assert "rubric contributor name 'core' is reserved" in {
        f.name: f.error for f in reg.failures
    }.get("p-core", "")
    assert "core" not in registry.names("rubric")
    errors = {f.name: f.error for f in reg.failures if f.name.startswith("p-")}
    assert "must accept the spec's argument" in errors["p-taskset"]
    assert "missing root" in errors["p-sandbox"]
    assert "needs a name" in errors["p-noname"]
    assert "p-good" not in errors
    assert registry.get("harness", "inproc-good").distribution == "d-g"
    assert registry.get("harness", "inproc-good").description == "A fine harness."


def test_undecorated_hook_is_reported(fresh_registry: Any) -> None:
    def agentkit_register_harnesses(register: Any) -> None:
        register(_GoodHarness)

    plain = types.SimpleNamespace(agentkit_register_harnesses=agentkit_register_harnesses)
    reg = fresh_registry([("p-plain", plain, "d-plain", "0.1")])
    (failure,) = [f for f in reg.failures if f.name == "p-plain"]
    assert failure.distribution == "d-plain"
    assert "agentkit_register_harnesses is not decorated with @agentkit.hookimpl" in failure.error


def test_hook_with_arguments_its_spec_lacks_is_reported(fresh_registry: Any) -> None:
    """pluggy's PluginValidationError becomes the plugin's failure, naming the hook and both
    signatures; the hooks pluggy registered before the bad one are taken out again."""

    def agentkit_register_commands(cli: click.Group) -> None:
        cli.command(name="half-registered")(lambda: None)

    def agentkit_register_harnesses(registr: Any) -> None:
        registr(_GoodHarness)

    bad = _plugin(
        agentkit_register_commands=agentkit_register_commands,
        agentkit_register_harnesses=agentkit_register_harnesses,
    )
    reg = fresh_registry([("p-args", bad, "d-args", "0.1")])
    (failure,) = [f for f in reg.failures if f.name == "p-args"]
    assert failure.distribution == "d-args"
    assert failure.error.startswith("invalid hook implementation: ")
    assert "hookimpl definition: agentkit_register_harnesses(registr: " in failure.error
    assert "the hook is agentkit_register_harnesses(register)" in failure.error
    assert "\n" not in failure.error
    assert "p-args" not in [p.name for p in registry.plugins()]
    group = click.Group()
    reg.add_commands(group)
    assert "half-registered" not in group.commands


def test_one_module_under_two_plugin_names_loads_once(fresh_registry: Any) -> None:
    module = types.ModuleType("agentkit_twice")
    module.agentkit_register_harnesses = agentkit.hookimpl(  # type: ignore[attr-defined]
        lambda register: register(_GoodHarness)
    )
    reg = fresh_registry([("p-first", module, "d-first", "1"), ("p-again", module, "d-again", "1")])
    (failure,) = [f for f in reg.failures if f.name == "p-again"]
    assert failure.distribution == "d-again"
    assert failure.error == "its module is already loaded as plugin 'p-first'"
    assert registry.get("harness", "inproc-good").plugin == "p-first"


def test_option_schema_and_unknown_kind(fresh_registry: Any) -> None:
    fresh_registry([])
    schema = registry.option_schema("taskset", "jsonl")
    assert [o["name"] for o in schema.describe()] == ["match", "taskset_id", "strict"]
    with pytest.raises(agentkit.SpecError, match="unknown kind 'widget'; expected one of"):
        registry.names("widget")  # type: ignore[arg-type]
    with pytest.raises(agentkit.SpecError, match="has no provider; expected PROVIDER:ARGUMENT"):
        registry.resolve_taskset("tasks.jsonl")
