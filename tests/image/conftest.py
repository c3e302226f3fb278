"""Fixtures of the image tests (marker `image`: `make image-test` builds the
image and runs them; the plain suite deselects them). See tests/harness/image.py.
`pod` here is the image's (ImagePod); `origin` and the rest are the suite's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.features import missing_feature
from tests.harness.image import Container, ImageConfig, ImagePod, image_ref, missing_tools


@pytest.fixture(scope="session")
def image() -> ImageConfig:
    missing = missing_tools()
    if missing:
        missing_feature(f"the image tests need {', '.join(missing)} (apt-get install buildah)")
    if os.geteuid() != 0:
        missing_feature("buildah run with chroot isolation needs root")
    ref = image_ref()
    try:
        return ImageConfig.inspect(ref)
    except RuntimeError as exc:
        pytest.fail(f"image {ref} is not built: run `make image` (make image-test does)\n{exc}")


@pytest.fixture(scope="session")
def container(image: ImageConfig) -> Iterator[Container]:
    made = Container(image)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def pod(container: Container, tmp_path: Path) -> ImagePod:
    return ImagePod(container, tmp_path)


# curl 7.84 added -w '%header{...}', which the operator's OnChange probes use.
_CURL_HEADER_VARS = (7, 84)


@pytest.fixture(scope="session")
def host_curl() -> str:
    """The reference of the operator tests (#30 item 5): the same command
    under this host's sh and curl, as curlimages/curl runs it."""
    import re
    import shutil
    import subprocess

    path = shutil.which("curl")
    if path is None:
        missing_feature(
            "curl on the host, the reference of the operator tests (apt-get install curl)"
        )
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    found = re.match(r"curl (\d+)\.(\d+)", out)
    if found is None or (int(found.group(1)), int(found.group(2))) < _CURL_HEADER_VARS:
        missing_feature(f"curl >= 7.84 on the host (-w %header), found {out[:40]!r}")
    for tool in ("flock", "sha256sum", "stat", "find"):
        if shutil.which(tool) is None:
            missing_feature(f"{tool} on the host, used by the operator's scripts")
    return path
