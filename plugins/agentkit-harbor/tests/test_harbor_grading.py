"""Harbor grading in a real local (bubblewrap) sandbox: every reward path and every error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentkit_harbor import (
    STEP_VERIFIER_TIMEOUT_SEC,
    HarborGradingError,
    HarborTaskError,
    HarborTaskset,
    MainRewardError,
    NopHarness,
    OracleHarness,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    StepSetupError,
    VerifierOutputParseError,
    VerifierTimeoutError,
    aggregate_steps,
    harbor_reward,
    harbor_rubric,
    load_task_dir,
    main_reward,
    min_reward_failure,
    parse_reward_files,
)
from agentkit_harbor._verify import verifier_settings
from harbor_helpers import needs_bwrap, task_sandbox

from agentkit import RunContext, call_reward
from agentkit import registry as agentkit_registry

pytestmark = [needs_bwrap, pytest.mark.anyio]

BASE = '[environment]\nworkdir = "/app"\nnetwork_mode = "no-network"\n'


async def grade(
    tmp_path: Path, task_dir: Path, harness: Any = None
) -> tuple[Any, dict[str, float] | BaseException, Path]:
    """Run ``harness`` (or nothing) then Harbor grading; (result, rewards or error, rollout dir)."""
    ts = HarborTaskset(str(task_dir))
    assert ts.problems == [], ts.problems
    (task,) = list(ts)
    root = tmp_path / "rollout"
    async with task_sandbox(ts, task, root) as sb:
        result = None
        if harness is not None:
            result = await harness.run(task, RunContext(sandbox=sb, rollout_id="r"))
        try:
            rewards: Any = await harbor_reward(sb, task, result)
        except HarborGradingError as exc:
            rewards = exc
    return result, rewards, root


@pytest.mark.parametrize(
    ("test_sh", "expected"),
    [
        ("echo 1 > /logs/verifier/reward.txt", {"reward": 1.0}),
        ("printf ' 0.25\\n' > /logs/verifier/reward.txt", {"reward": 0.25}),
        (
            'echo \'{"reward": 0.5, "accuracy": 0.75, "n": 3}\' > /logs/verifier/reward.json',
            {"reward": 0.5, "accuracy": 0.75, "n": 3.0},
        ),
        ("echo '{\"score\": 0.4}' > /logs/verifier/reward.json", {"reward": 0.4, "score": 0.4}),
        (  # JSON true/false are numbers to Harbor (1 and 0)
            'echo \'{"reward": 1, "flag": true, "off": false}\' > /logs/verifier/reward.json',
            {"reward": 1.0, "flag": 1.0, "off": 0.0},
        ),
        (  # several keys, no "reward": the mean is the total, every key a metric
            'echo \'{"a": 0.1, "b": 0.2}\' > /logs/verifier/reward.json',
            {"reward": pytest.approx(0.15), "a": 0.1, "b": 0.2},
        ),
        (  # reward.json exists: reward.txt is never read (Harbor's order), even without "reward"
            'echo \'{"a": 0.1, "b": 0.3}\' > /logs/verifier/reward.json; '
            "echo 0.9 > /logs/verifier/reward.txt",
            {"reward": pytest.approx(0.2), "a": 0.1, "b": 0.3},
        ),
        (  # an empty object: Harbor's metrics count it 0
            "echo '{}' > /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt",
            {"reward": 0.0},
        ),
        (  # reward.json wins over reward.txt
            "echo '{\"reward\": 0.3}' > /logs/verifier/reward.json; "
            "echo 1 > /logs/verifier/reward.txt",
            {"reward": 0.3},
        ),
        ("echo 1 > /logs/verifier/reward.txt; exit 7", {"reward": 1.0}),  # exit code ignored
    ],
)
async def test_reward_files(make_task, tmp_path: Path, test_sh: str, expected: dict) -> None:
    task = make_task("t", BASE, test_sh=test_sh + "\n")
    _, rewards, _ = await grade(tmp_path, task)
    assert rewards == expected


@pytest.mark.parametrize(
    ("test_sh", "error", "message"),
    [
        ("echo 'no reward here'", RewardFileNotFoundError, "neither /logs/verifier/reward.json"),
        (": > /logs/verifier/reward.txt", RewardFileEmptyError, "empty"),
        (": > /logs/verifier/reward.json", RewardFileEmptyError, "empty"),
        ("echo pass > /logs/verifier/reward.txt", VerifierOutputParseError, "not a number"),
        ("echo nan > /logs/verifier/reward.txt", VerifierOutputParseError, "non-finite"),
        ("echo inf > /logs/verifier/reward.txt", VerifierOutputParseError, "non-finite"),
        (
            "echo '{\"reward\": NaN}' > /logs/verifier/reward.json",
            VerifierOutputParseError,
            "non-finite",
        ),
        ("echo '[1, 2]' > /logs/verifier/reward.json", VerifierOutputParseError, "JSON object"),
        ("echo '{bad' > /logs/verifier/reward.json", VerifierOutputParseError, "not valid JSON"),
        (
            'echo \'{"x": "y"}\' > /logs/verifier/reward.json',
            VerifierOutputParseError,
            "'x' is not a number",
        ),
        (  # one non-numeric value spoils the file, as in Harbor (it was ignored before)
            'echo \'{"reward": 1, "note": "text"}\' > /logs/verifier/reward.json',
            VerifierOutputParseError,
            "'note' is not a number",
        ),
        (
            "echo '{\"reward\": null}' > /logs/verifier/reward.json",
            VerifierOutputParseError,
            "not a number",
        ),
        (
            'echo \'{"reward": {"x": 1}}\' > /logs/verifier/reward.json',
            VerifierOutputParseError,
            "not a number",
        ),
        (
            "echo '{\"reward\": 1e999}' > /logs/verifier/reward.json",
            VerifierOutputParseError,
            "non-finite",
        ),
        ("echo 0.5 > /logs/verifier/reward.json", VerifierOutputParseError, "JSON object"),
        (  # an invalid reward.json is an error even when reward.txt is fine
            "echo '{bad' > /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt",
            VerifierOutputParseError,
            "not valid JSON",
        ),
    ],
)
async def test_grading_errors(
    make_task, tmp_path: Path, test_sh: str, error: type, message: str
) -> None:
    task = make_task("t", BASE, test_sh="echo 'diagnostic line'\n" + test_sh + "\n")
    _, outcome, root = await grade(tmp_path, task)
    assert type(outcome) is error, outcome
    assert message in str(outcome)
    assert "diagnostic line" in str(outcome)  # the verifier's output is kept in the error
    assert "diagnostic line" in (root / "harbor" / "verifier" / "test-stdout.txt").read_text()


async def test_verifier_timeout(make_task, tmp_path: Path) -> None:
    task = make_task(
        "t",
        BASE + "[verifier]\ntimeout_sec = 1\n",
        test_sh="echo started; echo 1 > /logs/verifier/reward.txt; sleep 30\n",
    )
    _, outcome, _ = await grade(tmp_path, task)
    assert isinstance(outcome, VerifierTimeoutError) and outcome.kind == "verifier_timeout"
    assert "1 s" in str(outcome) and "started" in outcome.stdout


async def test_tests_dir_env_user_and_workdir(make_task, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AK_GRADE_HOST", "from-host")
    task = make_task(
        "t",
        BASE
        + '[verifier]\nuser = "root"\n'
        + 'env = { V1 = "${AK_GRADE_HOST:-x}", V2 = "${AK_NOPE:-dflt}" }\n'
        + '[environment.env]\nTASK_ENV = "t"\n',
        {"tests/helper.txt": "helper\n"},
        test_sh=(
            'ok=1; [ "$(cat /tests/helper.txt)" = helper ] || ok=0\n'
            '[ "$V1" = from-host ] || ok=0; [ "$V2" = dflt ] || ok=0; [ "$TASK_ENV" = t ] || ok=0\n'
            '[ "$(pwd)" = /app ] || ok=0\n'
            'echo "{\\"reward\\": $ok}" > /logs/verifier/reward.json\n'
        ),
    )
    _, rewards, _ = await grade(tmp_path, task)
    assert rewards == {"reward": 1.0}


async def test_artifacts_collected_into_the_rollout_dir(make_task, tmp_path: Path) -> None:
    task = make_task(
        "t",
        'artifacts = ["/app/out.txt", { source = "/app/logs", destination = "kept", '
        + 'exclude = ["*.tmp"] }, "/app/missing.txt"]\n'
        + BASE,
        files={
            "solution/solve.sh": "echo out > /app/out.txt; mkdir -p /app/logs\n"
            "echo a > /app/logs/a.log; echo t > /app/logs/b.tmp\n"
            "echo published > /logs/artifacts/p.txt\n"
        },
    )
    _, rewards, root = await grade(tmp_path, task, OracleHarness())
    assert rewards == {"reward": 1.0}
    art = root / "harbor" / "artifacts"
    assert (art / "app" / "out.txt").read_text() == "out\n"
    assert (art / "kept" / "a.log").is_file() and not (art / "kept" / "b.tmp").exists()
    assert (art / "logs" / "artifacts" / "p.txt").read_text() == "published\n"
    manifest = json.loads((art / "manifest.json").read_text())["artifacts"]
    status = {m["source"]: m["status"] for m in manifest}
    assert status == {
        "/logs/artifacts": "ok",
        "/app/out.txt": "ok",
        "/app/logs": "ok",
        "/app/missing.txt": "missing",
    }
    assert (root / "harbor" / "verifier" / "reward.txt").read_text() == "1\n"


async def test_grading_without_a_sandbox_is_an_error(make_task) -> None:
    task_dir = make_task("t", BASE)
    (task,) = list(HarborTaskset(str(task_dir)))
    with pytest.raises(HarborGradingError, match="sandbox"):
        await harbor_reward(None, task, None)


def test_rubric_manifest() -> None:
    rubric = harbor_rubric()
    assert [f.name for f in rubric] == ["reward"]
    assert rubric.manifest()[0]["function"].endswith("harbor_reward")


# ---------------------------------------------------------------------------
# multi-step

MULTI = """
schema_version = "1.1"
multi_step_reward_strategy = "{strategy}"
[environment]
workdir = "/app"
network_mode = "no-network"
[[steps]]
name = "one"
{min1}
[[steps]]
name = "two"
{min2}
[[steps]]
name = "three"
"""


def multi_task(
    make_task,
    *,
    strategy: str = "mean",
    min1: str = "",
    min2: str = "",
    rewards: tuple[str, str, str] = ("1", "1", "1"),
    extra: dict | None = None,
) -> Path:
    files = {}
    for name, value in zip(("one", "two", "three"), rewards, strict=True):
        files[f"steps/{name}/instruction.md"] = f"Do {name}."
        files[f"steps/{name}/tests/test.sh"] = (
            f"echo 'step {name}'; echo '{value}' > /logs/verifier/reward.json\n"
            if value.startswith("{")
            else f"echo 'step {name}'; echo {value} > /logs/verifier/reward.txt\n"
        )
        files[f"steps/{name}/solution/solve.sh"] = f"echo {name} >> /app/progress.txt\n"
    files.update(extra or {})
    return make_task(
        "multi",
        MULTI.format(strategy=strategy, min1=min1, min2=min2),
        files,
        instruction=None,
        test_sh=None,
    )


async def test_multi_step_mean_and_per_step_records(make_task, tmp_path: Path) -> None:
    task = multi_task(make_task, rewards=('{"reward": 1, "x": 1}', "0.5", '{"reward": 0}'))
    result, rewards, root = await grade(tmp_path, task, OracleHarness())
    assert result.status == "completed"
    assert rewards == {
        "reward": pytest.approx(0.5),
        "x": pytest.approx(1 / 3),
        "step.one.reward": 1.0,
        "step.two.reward": 0.5,
        "step.three.reward": 0.0,
        "steps_completed": 3.0,
    }
    steps = result.raw["harbor"]["steps"]
    assert [s["name"] for s in steps] == ["one", "two", "three"]
    assert steps[1]["rewards"] == {"reward": 0.5}
    assert "step two" in steps[1]["verifier"]["stdout"]
    for name in ("one", "two", "three"):
        assert (root / "harbor" / "steps" / name / "verifier" / "test-stdout.txt").is_file()
    types = [e.type for e in result.events]
    assert types.count("harbor.step") == 6 and "sandbox.exec" in types


async def test_min_reward_stops_the_remaining_steps(make_task, tmp_path: Path) -> None:
    task = multi_task(make_task, min2="min_reward = 0.9", rewards=("1", "0.5", "1"))
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert [s["name"] for s in result.raw["harbor"]["steps"]] == ["one", "two"]
    assert "below min_reward 0.9" in result.raw["harbor"]["stopped"]
    assert rewards["reward"] == pytest.approx(0.75) and rewards["steps_completed"] == 2.0


async def test_min_reward_table_and_final_strategy(make_task, tmp_path: Path) -> None:
    task = multi_task(
        make_task,
        strategy="final",
        min1="min_reward = { reward = 0.5, style = 0.5 }",
        rewards=('{"reward": 1, "style": 0.2}', "1", "1"),
    )
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert len(result.raw["harbor"]["steps"]) == 1
    # "final" takes the step that stopped the task, verbatim.
    assert rewards == {"reward": 1.0, "style": 0.2, "step.one.reward": 1.0, "steps_completed": 1.0}


async def test_workdir_upload_and_setup_before_each_step(make_task, tmp_path: Path) -> None:
    extra = {
        "steps/two/workdir/data.txt": "seed\n",
        "steps/two/workdir/setup.sh": 'echo setup-ran > /app/setup-marker; rm -- "$0"\n',
        "steps/two/tests/test.sh": (
            'ok=0; [ "$(cat /app/data.txt)" = seed ] && [ -f /app/setup-marker ] '
            "&& [ ! -e /app/setup.sh ] && ok=1; echo $ok > /logs/verifier/reward.txt\n"
        ),
        "steps/two/solution/solve.sh": "test -f /app/setup-marker\n",
    }
    task = multi_task(make_task, extra=extra)
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert result.status == "completed", result.error
    assert rewards["step.two.reward"] == 1.0 and rewards["reward"] == 1.0
    setup = [
        e for e in result.events if e.type == "sandbox.exec" and e.data["purpose"] == "step.setup"
    ]
    assert len(setup) == 1 and setup[0].data["exit_code"] == 0


async def test_failing_setup_stops_the_task(make_task, tmp_path: Path) -> None:
    extra = {"steps/two/workdir/setup.sh": "echo broken >&2; exit 4\n"}
    task = multi_task(make_task, strategy="final", extra=extra)
    result, outcome, _ = await grade(tmp_path, task, OracleHarness())
    assert result.status == "failed" and result.error_kind == "step_setup_failed"
    assert "exited with code 4" in result.error and "broken" in result.error
    assert isinstance(outcome, StepSetupError)


async def test_step_healthcheck_failure(make_task, tmp_path: Path) -> None:
    task = multi_task(
        make_task,
        min2='healthcheck = { command = "test -f /nowhere", interval_sec = 0.05, retries = 2 }',
    )
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert "healthcheck" in result.error and "2 time(s)" in result.error
    assert rewards["steps_completed"] == 1.0  # mean over the steps that ran


async def test_step_tests_merge_over_task_tests(make_task, tmp_path: Path) -> None:
    extra = {
        "tests/test.sh": "source /tests/lib.sh; check\n",
        "tests/lib.sh": "check() { echo 0 > /logs/verifier/reward.txt; }\n",
        "steps/one/tests/lib.sh": "check() { echo 1 > /logs/verifier/reward.txt; }\n",
    }
    task = multi_task(make_task, extra=extra)
    # Remove the steps' own test.sh so the task-level one runs with the merged lib.sh.
    (task / "steps" / "one" / "tests" / "test.sh").unlink()
    (task / "steps" / "two" / "tests" / "test.sh").unlink()
    _, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert rewards["step.one.reward"] == 1.0  # step lib.sh overrides the task's
    assert rewards["step.two.reward"] == 0.0  # task lib.sh


async def test_harness_unaware_of_steps_is_graded_step_by_step(make_task, tmp_path: Path) -> None:
    """A harness that ran the whole task in one go: the rubric verifies each step itself."""
    task = multi_task(make_task, min1="min_reward = 1", rewards=("0", "1", "1"))
    _, rewards, root = await grade(tmp_path, task, harness=None)
    assert rewards == {"reward": 0.0, "step.one.reward": 0.0, "steps_completed": 1.0}
    assert (root / "harbor" / "steps" / "one" / "verifier" / "reward.txt").is_file()


async def test_unset_step_verifier_env_stops_at_that_step(
    make_task, tmp_path: Path, monkeypatch
) -> None:
    # Harbor records the step's exception and stops; the earlier steps' rewards stand.
    monkeypatch.delenv("AK_STEP_UNSET", raising=False)
    task = multi_task(
        make_task,
        min2='[steps.verifier]\nenv = { X = "${AK_STEP_UNSET}" }',
        rewards=("1", "1", "1"),
    )
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    steps = result.raw["harbor"]["steps"]
    assert [s["name"] for s in steps] == ["one", "two"]
    assert steps[1]["rewards"] is None
    assert "steps.two.verifier.env.X" in steps[1]["grading_error"]["message"]
    assert "AK_STEP_UNSET" in result.raw["harbor"]["stopped"]
    assert rewards == {"reward": 1.0, "step.one.reward": 1.0, "steps_completed": 1.0}


async def test_multi_step_without_any_result_is_a_grading_error(make_task, tmp_path: Path) -> None:
    task = multi_task(make_task, rewards=("x", "1", "1"))
    result, outcome, _ = await grade(tmp_path, task, NopHarness())
    assert isinstance(outcome, VerifierOutputParseError)
    assert "step 'one'" in str(outcome)
    assert result.raw["harbor"]["steps"][0]["grading_error"]["kind"] == "reward_parse_error"


def test_pure_helpers() -> None:
    assert main_reward({"reward": 0.3, "x": 1}) == 0.3
    assert main_reward({"only": 0.7}) == 0.7
    assert main_reward({"a": 1, "b": 2}) == 1.5  # was an error: the mean is the default
    assert main_reward({"a": 1, "b": 2}, "min") == 1
    assert main_reward({"a": 1, "b": 2}, "max") == 2
    assert main_reward({"a": 1, "b": 2}, "sum") == 3
    assert main_reward({"reward": 0.3, "a": 1}, "max") == 0.3  # 'reward' wins over aggregates
    assert main_reward({"reward": 0.3, "a": 1}, "key:a") == 1  # an explicit key wins always
    assert main_reward({}) == 0.0
    with pytest.raises(MainRewardError, match="no key 'c'"):
        main_reward({"a": 1, "b": 2}, "key:c")
    assert min_reward_failure({"reward": 1}, 1.0) is None
    assert min_reward_failure({"reward": 0.5}, 1.0) == "reward=0.5 is below min_reward 1"
    assert min_reward_failure(None, 0.0) is not None  # no result counts as -inf
    assert min_reward_failure({"a": 1}, {"a": 1, "b": 0}) == "b=-inf is below min_reward 0"
    assert aggregate_steps([{"r": 1}, None, {"r": 0, "s": 1}], "mean") == {"r": 0.5, "s": 0.5}
    assert aggregate_steps([{"r": 1}, {"r": 0}], "final") == {"r": 0}
    assert aggregate_steps([None], "mean") is None and aggregate_steps([], "final") is None


def test_parse_reward_files_directly(tmp_path: Path) -> None:
    txt = tmp_path / "reward.txt"
    with pytest.raises(RewardFileNotFoundError):
        parse_reward_files(tmp_path / "reward.json", txt)
    txt.write_text("1e-1\n")
    assert parse_reward_files(None, txt)[0] == {"reward": 0.1}
    js = tmp_path / "reward.json"
    js.write_text('{"a": 1, "b": 0}')
    assert parse_reward_files(js, txt)[:2] == ({"a": 1.0, "b": 0.0}, "reward.json")


@pytest.mark.parametrize(
    ("option", "total"),
    [("mean", 0.5), ("min", 0.25), ("max", 0.75), ("sum", 1.0), ("key:b", 0.75)],
)
async def test_main_reward_option_picks_the_total(
    make_task, tmp_path: Path, option: str, total: float
) -> None:
    task_dir = make_task(
        "t", BASE, test_sh='echo \'{"a": 0.25, "b": 0.75}\' > /logs/verifier/reward.json\n'
    )
    schema = agentkit_registry.option_schema("taskset", "harbor")
    opts = schema.parse_cli([f"main_reward={option}"], flag="-T")
    ts = agentkit_registry.resolve_taskset(f"harbor:{task_dir}", **opts)
    (task,) = list(ts)
    async with task_sandbox(ts, task, tmp_path / "rollout") as sb:
        metrics = await call_reward(next(iter(ts.default_grading_spec)), _available(sb, task))
    assert metrics == {"reward": total, "a": 0.25, "b": 0.75}
    assert option.replace("key:", "") in ts.default_grading_spec.manifest()[0]["description"]


def _available(sandbox: Any, task: Any) -> dict[str, Any]:
    return {"sandbox": sandbox, "task": task, "result": None, "context": None}


def test_main_reward_option_is_checked(make_task) -> None:
    task_dir = make_task("t", BASE)
    with pytest.raises(HarborTaskError, match="main_reward must be one of mean, min, max, sum"):
        HarborTaskset(str(task_dir), main_reward="median")
    with pytest.raises(HarborTaskError, match="key:NAME"):
        HarborTaskset(str(task_dir), main_reward="key:")


async def test_missing_main_reward_key_is_a_grading_error(make_task, tmp_path: Path) -> None:
    task_dir = make_task("t", BASE, test_sh="echo '{\"a\": 1}' > /logs/verifier/reward.json\n")
    ts = HarborTaskset(str(task_dir), main_reward="key:score")
    (task,) = list(ts)
    async with task_sandbox(ts, task, tmp_path / "rollout") as sb:
        with pytest.raises(MainRewardError, match="no key 'score'"):
            await call_reward(next(iter(ts.default_grading_spec)), _available(sb, task))


async def test_step_without_its_own_verifier_timeout_gets_harbors_step_default(
    make_task, tmp_path: Path
) -> None:
    """Harbor gives a [[steps]] verifier its own default (600 s), not [verifier].timeout_sec."""
    task = multi_task(make_task, rewards=("1", "1", "1"))
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]", "[verifier]\ntimeout_sec = 1\n[environment]")
    )
    (task / "steps" / "one" / "tests" / "test.sh").write_text(
        "sleep 1.5; echo 1 > /logs/verifier/reward.txt\n"
    )
    spec = load_task_dir(task)
    assert verifier_settings(spec, spec.steps[0]).timeout_sec == STEP_VERIFIER_TIMEOUT_SEC == 600
    assert verifier_settings(spec, None).timeout_sec == 1
    result, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert result.raw["harbor"]["steps"][0]["rewards"] == {"reward": 1.0}
    assert rewards["steps_completed"] == 3.0


async def test_the_next_step_does_not_see_the_last_steps_tests(make_task, tmp_path: Path) -> None:
    """Harbor empties /tests and /logs/verifier after a step's verifier, before the next agent."""
    extra = {
        "steps/one/tests/secret_answers.txt": "42\n",
        "steps/two/solution/solve.sh": (
            "if [ -e /tests/secret_answers.txt ] || [ -e /logs/verifier/reward.txt ]; "
            "then echo seen > /app/peek; else echo clean > /app/peek; fi\n"
        ),
        "steps/two/tests/test.sh": (
            'if [ "$(cat /app/peek)" = clean ]; then echo 1; else echo 0; fi '
            "> /logs/verifier/reward.txt\n"
        ),
    }
    task = multi_task(make_task, extra=extra)
    _, rewards, _ = await grade(tmp_path, task, OracleHarness())
    assert rewards["step.two.reward"] == 1.0
