"""Pick a sandbox backend by name."""

from __future__ import annotations

from harnessproxy.errors import ConfigError
from harnessproxy.sandbox import Sandbox, SandboxSpec

BACKENDS = ("local", "docker")


def create(spec: SandboxSpec, backend: str = "local", image: str | None = None) -> Sandbox:
    """A sandbox of the named backend (not started)."""
    if backend == "local":
        from harnessproxy.sandbox.local import LocalSandbox

        return LocalSandbox(spec)
    if backend == "docker":
        from harnessproxy.sandbox.docker import DockerSandbox

        if not image:
            raise ConfigError("the docker backend needs an image")
        return DockerSandbox(spec, image=image)
    raise ConfigError(f"unknown sandbox backend {backend!r} (available: {', '.join(BACKENDS)})")
