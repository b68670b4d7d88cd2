"""A minimal base image made on this machine, for where no registry is reachable: busybox-static's binary
and its applet links, `docker import`ed. The docker tests and benchmark run on it."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

IMAGE = "harnessproxy-base:busybox"


def busybox_rootfs(dest: Path) -> Path:
    """A tiny root filesystem in `dest`: static busybox and its applets, /etc/passwd, the mount points."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not Path(busybox).exists() or b"ld-linux" in Path(busybox).read_bytes()[:65536]:
        raise RuntimeError("the base image needs a static busybox: apt-get install busybox-static")
    for d in ("bin", "etc", "tmp", "workspace", "root", "proc", "dev", "sys", "run"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    (dest / "tmp").chmod(0o1777)
    shutil.copy2(busybox, dest / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        link = dest / "bin" / applet
        if applet != "busybox" and not link.is_symlink():
            link.symlink_to("busybox")
    (dest / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    return dest


def ensure_base_image(client: Any) -> str:
    import docker.errors

    try:
        client.images.get(IMAGE)
        return IMAGE
    except docker.errors.ImageNotFound:
        pass
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(busybox_rootfs(Path(tmp)), arcname=".")
    client.api.import_image_from_data(
        buf.getvalue(),
        repository=IMAGE.split(":")[0],
        tag=IMAGE.split(":")[1],
        changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    )
    return IMAGE


def build_image(client: Any, context: Path, tag: str | None = None) -> str:
    """Build a task's image (its environment/ folder with a Dockerfile) offline: nothing is pulled, RUN steps
    get no network. Tags by a hash of the build context, so an unchanged context is built once."""
    import hashlib

    import docker.errors

    from harnessproxy.sandbox import SandboxError

    dockerfile = context / "Dockerfile"
    if not dockerfile.is_file():
        raise SandboxError(f"{context} has no Dockerfile")
    if tag is None:
        digest = hashlib.sha256()
        for path in sorted(p for p in context.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
        tag = f"harnessproxy-task:{digest.hexdigest()[:16]}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    for base in base_images(dockerfile.read_text()):  # the builder would pull a missing one: refuse first
        try:
            client.images.get(base)
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"{dockerfile}: base image {base!r} is not on this machine (nothing is pulled)"
            ) from exc
    try:
        client.images.build(
            path=str(context), tag=tag, pull=False, rm=True, forcerm=True, network_mode="none"
        )
    except docker.errors.BuildError as exc:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in exc.build_log)
        raise SandboxError(f"building {dockerfile} failed: {exc.msg}\n{log[-2000:]}") from exc
    except docker.errors.APIError as exc:
        raise SandboxError(f"building {dockerfile} failed: {exc.explanation or exc}") from exc
    return tag


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's FROM lines name, minus its own earlier stages and ARG-built names."""
    stages: set[str] = set()
    bases = []
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) < 2 or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        name = args[0]
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
        if name.lower() not in stages and "$" not in name and name.lower() != "scratch":
            bases.append(name)
    return bases
