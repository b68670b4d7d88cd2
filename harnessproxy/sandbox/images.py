"""A minimal base image made on this machine, for where no registry is reachable: busybox-static's binary
and its applet links, `docker import`ed. The docker tests and benchmark run on it."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

IMAGE = "harnessproxy-base:busybox"


def ensure_base_image(client: Any) -> str:
    import docker.errors

    try:
        client.images.get(IMAGE)
        return IMAGE
    except docker.errors.ImageNotFound:
        pass
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not Path(busybox).exists() or b"ld-linux" in Path(busybox).read_bytes()[:65536]:
        raise RuntimeError("the base image needs a static busybox: apt-get install busybox-static")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "tmp", "workspace", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    client.api.import_image_from_data(
        buf.getvalue(),
        repository=IMAGE.split(":")[0],
        tag=IMAGE.split(":")[1],
        changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    )
    return IMAGE
