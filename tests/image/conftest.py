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
