"""docker-compose.yml and the Dockerfile, validated without a Docker engine."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def env_example(name: str) -> dict[str, str]:
    lines = (REPO / "deploy" / f"{name}.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_services_volumes_and_health_checks():
    spec = compose()
    services = spec["services"]
    assert set(services) == {"postgres", "dashboard", "watch", "trainer"}
    assert services["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"][1]
    assert "/healthz" in " ".join(services["dashboard"]["healthcheck"]["test"])
    for name in ("dashboard", "watch", "trainer"):
        service = services[name]
        assert service["build"] == "."
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert service["env_file"] == "deploy/gapwatch.env"
    used = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    assert used == set(spec["volumes"]), "every named volume is declared and used"
    assert services["dashboard"]["ports"] == ["8050:8050"] and services["postgres"]["ports"] == ["5432:5432"]
    assert services["dashboard"]["command"][:3] == ["dashboard", "--host", "0.0.0.0"]
    assert services["watch"]["command"] == ["watch", "--all"]


def test_the_watch_service_scales():
    # `docker compose up --scale watch=N` needs replicas without a fixed name or host port.
    watch = compose()["services"]["watch"]
    assert "container_name" not in watch and "ports" not in watch
    assert "--scale watch=" in (REPO / "docker-compose.yml").read_text()


def test_secrets_live_in_env_files_only():
    text = (REPO / "docker-compose.yml").read_text()
    assert not re.search(r"(PASSWORD|TOKEN|WEBHOOK)[A-Z_]*\s*[:=]\s*\S", text), "no secret inline in compose"
    gapwatch, postgres = env_example("gapwatch"), env_example("postgres")
    assert postgres["POSTGRES_PASSWORD"] in gapwatch["GAPWATCH_STORE"]
    assert gapwatch["GAPWATCH_STORE"].startswith("postgresql://") and "@postgres:5432/" in gapwatch["GAPWATCH_STORE"]
    assert len(gapwatch["GAPWATCH_DASHBOARD_TOKEN"]) >= 12
    assert "SLACK_WEBHOOK_URL" in gapwatch
    ignored = (REPO / ".gitignore").read_text()
    assert "deploy/*.env" in ignored


def test_dockerfile_copies_every_package_and_runs_unprivileged():
    dockerfile = (REPO / "Dockerfile").read_text()
    for package in ("monitor", "evals", "trainer", "app"):
        assert f"COPY {package} {package}" in dockerfile
        assert (REPO / package).is_dir()
    assert re.search(r"^USER gapwatch$", dockerfile, re.M)
    assert 'ENTRYPOINT ["gapwatch"]' in dockerfile


def test_docker_compose_config_when_a_compose_cli_exists(tmp_path):
    docker = shutil.which("docker")
    has_compose = bool(docker) and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    if not has_compose:
        # No compose CLI on this machine: the parse-level checks above are the validation.
        assert compose()["name"] == "gapwatch"
        return
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    for example in (tmp_path / "deploy").glob("*.env.example"):
        shutil.copy(example, example.with_suffix(""))
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    result = subprocess.run([docker, "compose", "config", "-q"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
