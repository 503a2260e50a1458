"""``agentkit plugins``, ``agentkit list``, ``--version`` and bad input, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentkit

pytestmark = pytest.mark.xdist_group("agentkit-plugin-fixtures")


def env_for(site: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def cli(site: Path | None, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentkit", *args],
        env=env_for(site, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


PLUGIN_KEYS = {
    "name", "distribution", "version", "module", "tasksets", "harnesses", "rubrics", "sandboxes",
}  # fmt: skip


def test_plugins_prints_json_with_plugins_and_failures(site: Path) -> None:
    proc = cli(site, "plugins")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"plugins", "failed"}
    for plugin in data["plugins"]:
        assert set(plugin) == PLUGIN_KEYS
    for failure in data["failed"]:
        assert set(failure) == {"name", "distribution", "error"}
    good = {p["name"]: p for p in data["plugins"]}["fixture-good"]
    assert (good["distribution"], good["version"]) == ("agentkit-fixture-good", "1.2.3")
    assert "fixture-broken" in {f["name"] for f in data["failed"]}
    assert "Traceback" not in proc.stderr


def test_plugins_table_is_readable(site: Path) -> None:
    proc = cli(site, "plugins", "--table", COLUMNS="200")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    good_row = next(line for line in out.splitlines() if "fixture-good" in line)
    assert "agentkit-fixture-good" in good_row and "1.2.3" in good_row
    assert "tasksets: fixture-numbers" in out and "harnesses: fixture-echo" in out
    assert "failed to load" in out
    broken_row = next(line for line in out.splitlines() if "fixture-broken" in line)
    assert "fixture plugin is broken on purpose" in broken_row


@pytest.mark.parametrize(
    ("kind", "name", "description"),
    [
        ("harnesses", "fixture-echo", "Echoes the task input back, with typed options (fixture)."),
        (
            "tasksets",
            "fixture-numbers",
            "Count-up tasks named after the spec's argument (fixture).",
        ),
        ("tasksets", "jsonl", "Tasks read from a JSON Lines file, one task per line."),
        ("rubrics", "fixture-length", "Scores the length of the output (fixture)."),
        ("sandboxes", "fixture-null", "Never started; for tests."),
    ],
)
def test_list_prints_name_and_description(
    site: Path, kind: str, name: str, description: str
) -> None:
    proc = cli(site, "list", kind)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == sorted(names)
    (line,) = [x for x in lines if x.split()[0] == name]
    assert line.split(None, 1)[1] == description
    width = max(len(n) for n in names)
    assert line.startswith(name.ljust(width) + "  ")


def test_list_json_includes_plugin_and_options(site: Path) -> None:
    proc = cli(site, "list", "harnesses", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = {e["name"]: e for e in json.loads(proc.stdout)}
    echo = entries["fixture-echo"]
    assert echo["plugin"] == "fixture-good"
    assert echo["distribution"] == "agentkit-fixture-good"
    assert echo["version"] == "1.2.3"
    options = {o["name"]: o for o in echo["options"]}
    assert options["repeat"] == {"name": "repeat", "type": "int", "default": 1, "required": False}
    assert options["mode"]["type"] == "'plain'|'json'"
    assert "fixture-twin" not in entries  # contested by two distributions


def test_version(site: Path) -> None:
    for flag in ("--version", "-V"):
        proc = cli(None, flag)
        assert proc.returncode == 0
        assert proc.stdout.strip() == f"agentkit, version {agentkit.__version__}"


def test_console_script_runs() -> None:
    script = Path(sys.executable).parent / "agentkit"
    if not script.exists():
        pytest.skip("the agentkit console script is not installed next to this interpreter")
    proc = subprocess.run(
        [str(script), "list", "tasksets"], capture_output=True, text=True, env=env_for(None)
    )
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("jsonl  ") for line in proc.stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["list", "widgets"], ["'widgets' is not one of", "harnesses", "sandboxes"]),
        (["list"], ["Missing argument 'KIND'"]),
        (["plugins", "--bogus"], ["No such option", "--bogus"]),
        (["no-such-command"], ["No such command 'no-such-command'"]),
        (["fixture-fail"], ["Error: fixture spec is malformed: expected PROVIDER:ARGUMENT"]),
    ],
)
def test_bad_input_exits_2_with_one_message(
    site: Path, args: list[str], fragments: list[str]
) -> None:
    proc = cli(site, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    for fragment in fragments:
        assert fragment in proc.stderr
    assert proc.stderr.count("Error") == 1
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback(site: Path) -> None:
    proc = cli(site, "--debug", "fixture-fail")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "SpecError: fixture spec is malformed" in proc.stderr


def test_plugin_commands_come_from_the_hook(site: Path) -> None:
    proc = cli(site, "fixture-hello", "world")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello world\n"
    blocked = cli(site, "fixture-hello", "world", AGENTKIT_DISABLE_PLUGINS="fixture-good")
    assert blocked.returncode == 2
    assert "No such command 'fixture-hello'" in blocked.stderr


# --- what each entry point imports (not how long it takes: see bench/startup.py) ---


def imported_modules(site: Path, code: str, **extra: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json as _json, sys as _sys
        _sys.__stdout__.write("\\nMODULES " + _json.dumps(sorted(_sys.modules)) + "\\n")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env_for(site, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES "))
    modules: list[str] = json.loads(line[len("MODULES ") :])
    return modules


def tops(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


HEAVY = {"openai", "httpx", "mcp", "cattrs", "rich", "click", "boto3", "datasets", "aiohttp"}


def test_import_agentkit_is_light(site: Path) -> None:
    modules = imported_modules(site, "import agentkit\nagentkit.__version__")
    assert not tops(modules) & HEAVY, sorted(tops(modules) & HEAVY)
    loaded_plugins = [m for m in modules if m.startswith("agentkit_fixture_")]
    assert loaded_plugins == []
    assert not {"agentkit._plugins", "agentkit._builtins", "agentkit.registry"} & set(modules)
    assert "importlib.metadata" not in modules  # no entry point was even looked up


def test_help_lists_plugin_commands_but_loads_no_plugin_code(site: Path) -> None:
    code = """
        import sys
        from agentkit.cli import main
        try:
            main(["--help"])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        """
    modules = imported_modules(site, code)
    assert not tops(modules) & (HEAVY - {"click"}), sorted(tops(modules) & HEAVY)
    # the plugins' entry modules are imported for their commands, but nothing is registered
    assert not {"agentkit._builtins", "agentkit.registry"} & set(modules)
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit", "--help"],
        env=env_for(site, AGENTKIT_PLUGINS="fixture-good"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Commands added by plugins" in proc.stdout


def test_listing_plugins_imports_no_model_client(site: Path) -> None:
    code = """
        import io, contextlib
        from agentkit.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["plugins"])
            except SystemExit as exc:
                assert exc.code in (0, None), exc.code
        """
    modules = imported_modules(site, code, AGENTKIT_PLUGINS="fixture-good")
    assert "agentkit_fixture_good" in tops(modules)  # the plugin itself was loaded
    assert not tops(modules) & {"openai", "mcp", "boto3", "datasets"}


def test_agentkit_modules_leave_sys_path_alone(site: Path) -> None:
    """In a fresh interpreter, so the plugins really are loaded (and nothing was before)."""
    code = """
        import json, sys
        before = list(sys.path)
        assert "agentkit._plugins" not in sys.modules
        from agentkit import registry
        registry.names("taskset")
        loaded = [p.distribution for p in registry.plugins()]
        print("RESULT " + json.dumps({"same": sys.path == before, "loaded": loaded}))
        """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env_for(site, AGENTKIT_PLUGINS="fixture-good"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert "agentkit-fixture-good" in result["loaded"]  # a plugin was imported just now
    assert result["loaded"][0] == "agentkit"  # the built-ins come first
    assert result["same"] is True
