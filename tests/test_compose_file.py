"""Reading a compose file for the local sandbox: this project's own compose tasks, and hostile ones.

Real files through the real YAML reader; every refusal is one error naming
the file, the service and the reason, before anything would start.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agentkit.sandbox.local._composefile import (
    Build,
    ComposeError,
    Dependency,
    VolumeMount,
    load_compose,
)

ROOT = Path(__file__).resolve().parents[1]
SIDECAR = (
    ROOT / "examples" / "harbor-docker" / "sidecar-api" / "environment" / "docker-compose.yaml"
)


def _task(tmp_path: Path, text: str) -> Path:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True, exist_ok=True)
    (env / "api").mkdir(exist_ok=True)
    path = env / "docker-compose.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _refused(path: Path, **kwargs: object) -> list[str]:
    with pytest.raises(ComposeError) as info:
        load_compose(path, **kwargs)  # type: ignore[arg-type]
    assert str(path) in str(info.value)
    return list(info.value.problems)


def test_the_sidecar_example_reads_as_its_services() -> None:
    compose = load_compose(SIDECAR)
    main, api = compose.services["main"], compose.services["api"]
    assert main.depends_on == (Dependency("api", "service_healthy"),)
    assert main.image is None and main.build is None  # the task's own image
    assert api.build == Build(context=str(SIDECAR.parent / "api"))
    assert api.healthcheck is not None
    assert api.healthcheck.test[0] == "CMD" and api.healthcheck.test[1] == "python3"
    assert (api.healthcheck.interval, api.healthcheck.retries) == (1.0, 30)
    assert api.healthcheck.timeout == 30.0  # compose's default
    assert compose.start_order() == ["api", "main"]


def test_the_docker_sandbox_tests_compose_file_reads(tmp_path: Path) -> None:
    # as tests/test_sandbox_docker.py writes it
    path = _task(
        tmp_path,
        "services:\n  main:\n    depends_on:\n      side:\n        condition: service_healthy\n"
        "  side:\n    build:\n      context: ./api\n    healthcheck:\n"
        "      test: ['CMD', 'python3', '-c', \"import socket; "
        "socket.create_connection(('localhost', 5000))\"]\n"
        "      interval: 1s\n      retries: 30\n",
    )
    assert load_compose(path).start_order() == ["side", "main"]


def test_every_supported_field_is_typed(tmp_path: Path) -> None:
    path = _task(
        tmp_path,
        """\
        name: shop
        x-common: &common
          restart: on-failure:3
        services:
          main:
            image: "python:${PY:-3.12}-slim"
            working_dir: /app
            user: "1000:1000"
            environment:
              DB_URL: postgres://db:5432/shop
              DEBUG: true
            volumes:
              - data:/var/data
              - ./api:/app/api:ro
              - type: tmpfs
                target: /scratch
            tmpfs: [/run/cache]
            depends_on:
              db: {condition: service_healthy}
              migrate: {condition: service_completed_successfully}
            ports: ["8080:80", 9000, {target: 7000, published: 7001}]
          db:
            <<: *common
            image: postgres:16
            command: ["postgres", "-c", "fsync=off"]
            entrypoint: docker-entrypoint.sh
            environment: [POSTGRES_PASSWORD=$$ecret, EMPTY=]
            cap_add: [CHOWN, CAP_NET_BIND_SERVICE]
            healthcheck:
              test: pg_isready -U postgres
              interval: 1m30s
              timeout: 500ms
              start_period: 2s
              retries: 5
            networks:
              default:
                aliases: [database, pg]
            container_name: shop-db
            logging: {driver: syslog, options: {syslog-address: "udp://203.0.113.1:514"}}
            volumes: [data:/var/lib/postgresql/data]
          migrate:
            image: ${REGISTRY}/migrate
            depends_on: [db]
            healthcheck: {disable: true}
            x-note: anything
        volumes:
          data: {}
        """,
    )
    compose = load_compose(path, env={"REGISTRY": "reg.example"})
    main, db, migrate = (compose.services[n] for n in ("main", "db", "migrate"))
    assert main.image == "python:3.12-slim"
    assert (main.working_dir, main.user) == ("/app", "1000:1000")
    assert main.environment == {"DB_URL": "postgres://db:5432/shop", "DEBUG": "true"}
    api = str(path.parent / "api")
    assert main.volumes == (
        VolumeMount("volume", "data", "/var/data"),
        VolumeMount("bind", api, "/app/api", read_only=True),
        VolumeMount("tmpfs", "", "/scratch"),
        VolumeMount("tmpfs", "", "/run/cache"),
    )
    assert main.depends_on == (
        Dependency("db", "service_healthy"),
        Dependency("migrate", "service_completed_successfully"),
    )
    assert main.ports == (80, 9000, 7000)
    assert db.restart == "on-failure:3"
    assert db.command == ("postgres", "-c", "fsync=off")
    assert db.entrypoint == "docker-entrypoint.sh"
    assert db.environment == {"POSTGRES_PASSWORD": "$ecret", "EMPTY": ""}
    assert db.aliases == ("database", "pg", "shop-db")  # container_name: one more name
    assert db.healthcheck is not None
    assert db.healthcheck.test == ("CMD-SHELL", "pg_isready -U postgres")
    assert (db.healthcheck.interval, db.healthcheck.timeout) == (90.0, 0.5)
    assert (db.healthcheck.start_period, db.healthcheck.retries) == (2.0, 5)
    assert migrate.image == "reg.example/migrate"
    assert migrate.depends_on == (Dependency("db"),)
    assert migrate.healthcheck is None and migrate.healthcheck_disabled
    assert compose.volumes == ("data",)
    assert compose.start_order() == ["db", "migrate", "main"]


def test_every_refused_feature_is_named_in_one_error(tmp_path: Path) -> None:
    path = _task(
        tmp_path,
        """\
        services:
          main:
            privileged: true
            network_mode: host
          sidecar:
            image: busybox
            devices: ["/dev/kvm:/dev/kvm"]
            cap_add: [NET_ADMIN, SYS_ADMIN, CHOWN]
            pid: host
            security_opt: [seccomp:unconfined]
            frobnicate: 1
        secrets:
          token: {file: ./token}
        """,
    )
    problems = _refused(path)
    text = "\n".join(problems)
    assert "service 'main': privileged: needs root on the host" in text
    assert "service 'main': network_mode: the host's network is not supported" in text
    assert "service 'sidecar': devices:" in text
    assert "service 'sidecar': cap_add: NET_ADMIN, SYS_ADMIN would need root" in text
    assert "CHOWN" not in text  # a capability a service keeps anyway
    assert "service 'sidecar': pid: host namespaces" in text
    assert "service 'sidecar': security_opt:" in text
    assert "service 'sidecar': frobnicate: not supported" in text
    assert "top-level secrets: not supported" in text
    assert len(problems) == 8


@pytest.mark.parametrize(
    ("volume", "why"),
    [
        ("/:/host", "bind mount '/' is outside the task's folder"),
        ("/var/run/docker.sock:/var/run/docker.sock", "outside the task's folder"),
        ("../../..:/up", "bind mount '../../..' is outside the task's folder"),
        ("~/.ssh:/keys", "outside the task's folder"),
        ("escape:/x", "volume 'escape' is not declared"),
        ("/data", "anonymous volume"),
        ("./api:/x:shared", "mode 'shared' is not supported"),
    ],
)
def test_a_volume_reaching_outside_the_task_is_refused(
    tmp_path: Path, volume: str, why: str
) -> None:
    path = _task(tmp_path, f"services:\n  main:\n    volumes: [{volume!r}]\n")
    (problem,) = _refused(path)
    assert problem.startswith("service 'main': volumes[0]")
    assert why in problem


def test_a_symlink_out_of_the_task_is_refused(tmp_path: Path) -> None:
    path = _task(tmp_path, "services:\n  main:\n    volumes: ['./api/out:/x']\n")
    (path.parent / "api" / "out").symlink_to("/etc")
    (problem,) = _refused(path)
    assert "outside the task's folder" in problem


def test_a_build_context_outside_the_task_is_refused(tmp_path: Path) -> None:
    path = _task(
        tmp_path,
        "services:\n  side:\n    build: {context: /, dockerfile: etc/passwd, network: host}\n",
    )
    problems = _refused(path)
    assert "service 'side': build.network: not supported by the local sandbox" in problems
    assert any("build context '/' is outside the task's folder" in p for p in problems)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("services:\n  main:\n    healthcheck: {test: [CMD, x], interval: soon}\n",
         "service 'main': healthcheck.interval: expected a duration such as 1s or 1m30s, "
         "got 'soon'"),
        ("services:\n  main:\n    healthcheck: {test: [PING]}\n",
         "service 'main': healthcheck.test: expected [CMD, ...], [CMD-SHELL, line] or [NONE]"),
        ("services:\n  main:\n    healthcheck: {test: x, retries: -1}\n",
         "service 'main': healthcheck.retries: expected a whole number of at least 0"),
        ("services:\n  main:\n    depends_on: {db: {condition: service_ready}}\n",
         "service 'main': depends_on.db.condition: expected one of service_started, "
         "service_healthy, service_completed_successfully"),
        ("services:\n  main:\n    depends_on: [ghost]\n",
         "service 'main': depends_on: no service 'ghost'"),
        ("services:\n  main:\n    restart: sometimes\n",
         "service 'main': restart: expected no, always, on-failure[:N] or unless-stopped"),
        ("services:\n  main:\n    ports: ['80:http']\n",
         "service 'main': ports: expected a port such as 8080 or 8080:80, got '80:http'"),
        ("services:\n  main: {}\n  side: {environment: [A=1]}\n",
         "service 'side': has neither image nor build"),
        ("services:\n  main:\n    image: ${TAG?set TAG first}\n",
         "file.services.main.image: variable TAG is required: set TAG first"),
        ("services:\n  main:\n    networks: {back: {ipv4_address: 10.0.0.2}}\n"
         "networks:\n  back: {driver: macvlan}\n",
         "network 'back': driver: not supported (one private network per rollout)"),
        ("services: [main]\n", "expected a mapping with a 'services' mapping"),
        ("services:\n  main: {image: [unclosed\n", "is not valid YAML"),
    ],
)  # fmt: skip
def test_a_malformed_field_is_named_with_what_was_expected(
    tmp_path: Path, text: str, why: str
) -> None:
    problems = _refused(_task(tmp_path, text))
    assert any(why in p for p in problems), problems


def test_a_dependency_cycle_is_refused(tmp_path: Path) -> None:
    path = _task(
        tmp_path,
        "services:\n  main: {depends_on: [a]}\n  a: {image: x, depends_on: [b]}\n"
        "  b: {image: x, depends_on: [a]}\n",
    )
    assert _refused(path) == ["depends_on has a cycle: a -> b -> a"]


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    problems = _refused(tmp_path / "nope.yaml")
    assert problems[0].startswith("cannot be read:")


def test_an_included_services_build_context_counts_from_its_own_file(tmp_path: Path) -> None:
    """``build: .`` (the short form) in an included file is that file's folder, as in
    compose: it was the top file's folder."""
    path = _task(tmp_path, "include: [api/api.yaml]\nservices:\n  main: {}\n")
    (path.parent / "api" / "api.yaml").write_text("services:\n  api:\n    build: .\n")
    api = load_compose(path).services["api"]
    assert api.build == Build(context=str(path.parent / "api"), dockerfile="Dockerfile")
