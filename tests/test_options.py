"""Typed plugin options: ``-H name=value`` parsing and strict keyword checking."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from agentkit import OptionError
from agentkit._options import OptionSchema
from agentkit.sandbox.docker import DockerKeywords, DockerOptions, DockerSandbox
from agentkit.sandbox.host import HostKeywords, HostOptions, HostSandbox
from agentkit.sandbox.local import LocalKeywords, LocalOptions, LocalSandbox


class Harnessish:
    """A factory with one option of every supported type (annotations are strings here)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        turns: int = 3,
        temperature_scale: float = 1.0,
        verbose: bool = False,
        label: str = "x",
        mode: Literal["fast", "slow"] = "fast",
        level: Literal[1, 2] = 1,
        limit: int | None = None,
        tags: list[str] | None = None,
        sizes: list[int] | None = None,
        env: dict[str, str] | None = None,
        _private: int = 0,
    ) -> None:
        pass


def schema() -> OptionSchema:
    return OptionSchema.from_callable("harness 'h'", Harnessish)


def test_schema_reads_signature_with_string_annotations() -> None:
    described = {o["name"]: o for o in schema().describe()}
    assert list(described) == [
        "model_dir", "turns", "temperature_scale", "verbose", "label", "mode", "level",
        "limit", "tags", "sizes", "env",
    ]  # fmt: skip
    assert described["model_dir"] == {
        "name": "model_dir", "type": "Path", "default": None, "required": True,
    }  # fmt: skip
    assert described["turns"]["type"] == "int"
    assert described["mode"]["type"] == "'fast'|'slow'"
    assert described["limit"]["type"] == "int | None"
    assert described["env"]["type"] == "dict[str, str] | None"


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        ("turns=10", {"turns": 10}),
        ("turns=-2", {"turns": -2}),
        ("temperature-scale=0.5", {"temperature_scale": 0.5}),
        ("temperature_scale=2", {"temperature_scale": 2.0}),
        ("verbose=true", {"verbose": True}),
        ("verbose=no", {"verbose": False}),
        ("verbose=1", {"verbose": True}),
        ("label=a=b", {"label": "a=b"}),
        ("label=", {"label": ""}),
        ("model_dir=/tmp/m", {"model_dir": Path("/tmp/m")}),
        ("mode=slow", {"mode": "slow"}),
        ("level=2", {"level": 2}),
        ("limit=5", {"limit": 5}),
        ("limit=none", {"limit": None}),
        ("tags=a,b", {"tags": ["a", "b"]}),
        ('tags=["a,b", "c"]', {"tags": ["a,b", "c"]}),
        ("sizes=1,2,3", {"sizes": [1, 2, 3]}),
        ("sizes=[4]", {"sizes": [4]}),
        ('env={"A": "1"}', {"env": {"A": "1"}}),
    ],
)
def test_parse_cli_by_type(pair: str, expected: dict[str, Any]) -> None:
    parsed = schema().parse_cli([pair])
    assert parsed == expected
    for name, value in expected.items():
        assert type(parsed[name]) is type(value)


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("turns=ten", "-H turns='ten' for harness 'h': expected int (an integer)"),
        ("turns=1.5", "expected int"),
        ("verbose=maybe", "expected bool (true or false)"),
        ("temperature_scale=hot", "expected float (a number)"),
        ("mode=medium", "expected 'fast'|'slow' (one of fast, slow)"),
        ("sizes=1,x", "expected list[int] | None"),
        ('env={"A": 1}', "expected dict[str, str] | None"),
        ("env=notjson", "expected dict[str, str] | None"),
        ("turns", "-H 'turns': expected name=value (for harness 'h')"),
        ("=3", "expected name=value"),
    ],
)
def test_parse_cli_rejects_bad_values(pair: str, message: str) -> None:
    with pytest.raises(OptionError) as info:
        schema().parse_cli([pair])
    assert message in str(info.value)


def test_an_option_given_twice_is_refused() -> None:
    """`-H turns=3 -H turns=5` (or turns / turns with a dash) is a mistake, not "last wins"."""
    with pytest.raises(OptionError) as info:
        schema().parse_cli(["turns=3", "label=a", "turns=5"], flag="-H")
    assert str(info.value) == "-H turns given twice for harness 'h'; give it once"
    with pytest.raises(OptionError, match="temperature_scale given twice"):
        schema().parse_cli(["temperature-scale=1", "temperature_scale=2"])


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(OptionError) as info:
        schema().parse_cli(["turnz=3"], flag="-H")
    assert str(info.value).startswith(
        "unknown option 'turnz' for harness 'h'; its options are: model_dir (Path), turns (int), "
        "temperature_scale (float), verbose (bool), label (str), mode ('fast'|'slow')"
    )
    with pytest.raises(OptionError, match="unknown option '_private'"):
        schema().validate({"model_dir": "/x", "_private": 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"turns": "10"}, "option 'turns' for harness 'h': expected int, got str '10'"),
        ({"turns": True}, "expected int, got bool True"),
        ({"turns": 1.0}, "expected int, got float 1.0"),
        ({"verbose": "true"}, "expected bool, got str 'true'"),
        ({"verbose": 1}, "expected bool, got int 1"),
        ({"label": 3}, "expected str, got int 3"),
        ({"mode": "medium"}, "expected 'fast'|'slow', got str 'medium'"),
        ({"level": True}, "expected 1|2, got bool True"),
        ({"tags": "a,b"}, "expected list[str] | None, got str 'a,b'"),
        ({"sizes": ["1"]}, "expected list[int] | None"),
        ({"env": {"A": 1}}, "expected dict[str, str] | None"),
    ],
)
def test_python_keywords_are_checked_without_coercion(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionError) as info:
        schema().validate({"model_dir": Path("/m"), **kwargs})
    assert message in str(info.value)


def test_valid_python_keywords_pass_unchanged() -> None:
    values = {
        "model_dir": "/m",
        "turns": 2,
        "temperature_scale": 1,
        "verbose": True,
        "mode": "slow",
        "level": 2,
        "limit": None,
        "tags": ["a"],
        "env": {"A": "b"},
    }
    assert schema().validate(values) == values


def test_missing_required_option() -> None:
    with pytest.raises(OptionError, match=r"harness 'h' needs option\(s\): model_dir"):
        schema().validate({"turns": 1})


def test_open_ended_factory_accepts_extra_options() -> None:
    def factory(argument: str, *, size: int = 1, **extra: Any) -> None:
        pass

    s = OptionSchema.from_callable("taskset provider 'f'", factory, skip=1)
    assert list(s.options) == ["size"]
    assert s.parse_cli(["size=2", "anything=[1, 2]", "word=hello"]) == {
        "size": 2,
        "anything": [1, 2],
        "word": "hello",
    }
    assert s.validate({"whatever": object()}) is not None
    with pytest.raises(OptionError, match="expected int"):
        s.validate({"size": "2"})


def test_class_without_init_takes_no_options() -> None:
    class Bare:
        async def run(self, task: Any, context: Any = None, on_event: Any = None) -> None:
            return None

    s = OptionSchema.from_callable("harness 'bare'", Bare)
    assert s.describe() == []
    with pytest.raises(OptionError, match="its options are: none"):
        s.validate({"x": 1})


def test_unresolvable_annotation_counts_as_any() -> None:
    def factory(argument: str, *, thing: NotDefinedAnywhere = None) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    s = OptionSchema.from_callable("taskset provider 'f'", factory, skip=1)
    assert s.parse_cli(["thing=3"]) == {"thing": 3}
    assert s.validate({"thing": "anything"}) == {"thing": "anything"}


@attrs.frozen(kw_only=True)
class BoxOptions:
    """A sandbox kind's options written once, as an attrs class."""

    allow_network: bool = False
    mode: Literal["auto", "host"] = "auto"
    limit: int | None = None
    binds: list[str] = attrs.field(factory=list)


class Boxish:
    """A factory taking its options as ``**options``, declared by ``options_type``."""

    options_type = BoxOptions

    def __init__(self, *, root: Path, rollout_id: str = "", **options: Any) -> None:
        self.options = BoxOptions(**options)


def test_options_declared_as_an_attrs_class_are_the_schema() -> None:
    schema = OptionSchema.from_callable("sandbox 'box'", Boxish)
    assert schema.describe() == [
        {"name": "root", "type": "Path", "default": None, "required": True},
        {"name": "rollout_id", "type": "str", "default": "", "required": False},
        {"name": "allow_network", "type": "bool", "default": False, "required": False},
        {"name": "mode", "type": "'auto'|'host'", "default": "auto", "required": False},
        {"name": "limit", "type": "int | None", "default": None, "required": False},
        {"name": "binds", "type": "list[str]", "default": [], "required": False},
    ]
    assert schema.parse_cli(["mode=host", "binds=/a,/b"], flag="-S") == {
        "mode": "host",
        "binds": ["/a", "/b"],
    }
    # only the declared options: **options is not open-ended
    with pytest.raises(OptionError, match=r"unknown option 'modes'.*mode \('auto'\|'host'\)"):
        schema.parse_cli(["modes=host"], flag="-S")
    with pytest.raises(OptionError, match="option 'limit' for sandbox 'box': expected int"):
        schema.validate({"limit": "3"})


def test_the_built_in_sandboxes_options_are_their_options_classes() -> None:
    for factory, options in (
        (LocalSandbox, LocalOptions),
        (DockerSandbox, DockerOptions),
        (HostSandbox, HostOptions),
    ):
        schema = OptionSchema.from_callable("sandbox", factory)
        per_rollout = ["root", "hints", "rollout_id", "model_endpoint"]
        assert list(schema.options) == per_rollout + [f.name for f in attrs.fields(options)]
        assert not schema.open_ended
        # the constructor's annotations are read in its own module's names
        assert schema.options["root"].type_name == "Path"
        assert schema.options["hints"].type_name == "ExecutionHints | None"
        for field in attrs.fields(options):
            assert schema.options[field.name].default == field.default, field.name


@pytest.mark.parametrize(
    ("options", "keywords"),
    [(LocalOptions, LocalKeywords), (DockerOptions, DockerKeywords), (HostOptions, HostKeywords)],
)
def test_the_constructors_keywords_are_the_options_classes_fields(
    options: type[Any], keywords: type[Any]
) -> None:
    # mypy reads a constructor's options from the keywords (**options: Unpack[...]),
    # everything else from the class: the two say the same, name for name, type for type
    fields = typing.get_type_hints(attrs.resolve_types(options))
    typed = typing.get_type_hints(keywords)
    rollout = ["hints", "rollout_id", "model_endpoint"]  # every kind's, before its own
    assert list(typed)[:3] == rollout
    assert [(k, v) for k, v in typed.items() if k not in rollout] == list(fields.items())
    assert not keywords.__required_keys__
