"""``--payload-schema FILE``: payloads in a binary format of a declared schema, read before
any JVM starts, so a missing file, a bad schema or an unknown message is one line (exit 2).

- ``.avsc``: an Avro record schema (JSON); each payload is one record in Avro binary
  encoding, no container header. The text is passed to Spark's ``from_avro`` as it is.
- ``.proto``: a Protobuf file, compiled here into a ``FileDescriptorSet`` (imports
  included, Google's well-known types found) by the ``protoc`` that ``grpcio-tools``
  bundles (``python -m grpc_tools.protoc``, the ``pipeline`` extra), in a temporary
  directory. The message is ``--payload-message NAME`` (fully qualified, or relative to
  the file's package; a nested one as ``Outer.Inner``), else the first message the file
  declares at top level.

What the payloads become is :mod:`.transforms.payload`'s. This module imports neither
pyspark nor protobuf at import time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from ferromq.pipeline.errors import PipelineError

__all__ = ["AVRO", "PROTOBUF", "PayloadSchema", "load_payload_schema"]

AVRO: Final = "avro"
PROTOBUF: Final = "protobuf"
_KINDS: Final = {".avsc": AVRO, ".proto": PROTOBUF}
PROTOC_TIMEOUT: Final = 60.0
_LOG_LINE: Final = re.compile(r"WARNING|[WIE]\d{4} ")  # absl's log lines, not protoc's
PROTOC_HINT: Final = "pip install grpcio-tools (in ferromq[pipeline]; it bundles protoc)"


@dataclass(frozen=True)
class PayloadSchema:
    """A payload schema, checked: the Avro schema's text, or the compiled Protobuf
    descriptor set and the full name of the message."""

    kind: Literal["avro", "protobuf"]
    path: str
    avro_schema: str = ""
    descriptor_set: bytes = b""
    message: str = ""


def load_payload_schema(path: str, message: str | None = None) -> PayloadSchema:
    """The schema in ``path`` (``.avsc`` or ``.proto``). Raises :class:`PipelineError`."""
    file = Path(path)
    kind = _KINDS.get(file.suffix.lower())
    if kind is None:
        raise PipelineError(f"--payload-schema {path}: expected a .avsc or a .proto file")
    if not file.is_file():
        raise PipelineError(f"--payload-schema {path}: no such file")
    if kind == AVRO:
        if message is not None:
            raise PipelineError("--payload-message names a message of a .proto schema")
        return PayloadSchema(AVRO, path, avro_schema=_avro_schema(file))
    descriptor_set = _compile(file)
    return PayloadSchema(
        PROTOBUF,
        path,
        descriptor_set=descriptor_set,
        message=_message(file, descriptor_set, message),
    )


def _avro_schema(file: Path) -> str:
    """The schema's text once it is a JSON record schema; Spark checks the rest."""
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PipelineError(f"--payload-schema {file}: not JSON ({exc})") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise PipelineError(
            f'--payload-schema {file}: not an Avro record schema ("type": "record")'
        )
    if not isinstance(parsed.get("fields"), list):
        raise PipelineError(f'--payload-schema {file}: an Avro record needs "fields" (a list)')
    return text


def _compile(file: Path) -> bytes:
    """``file`` as a serialized ``FileDescriptorSet``, its imports included."""
    try:
        import grpc_tools
    except ImportError:
        raise PipelineError(
            f"--payload-schema {file}: compiling a .proto needs {PROTOC_HINT}"
        ) from None
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    source = file.resolve()
    with tempfile.TemporaryDirectory(prefix="ferromq-proto-") as work:
        out = Path(work) / "descriptor.pb"
        done = subprocess.run(
            [
                sys.executable, "-m", "grpc_tools.protoc",
                f"-I{source.parent}", f"-I{well_known}",
                f"--descriptor_set_out={out}", "--include_imports", source.name,
            ],
            capture_output=True, text=True, timeout=PROTOC_TIMEOUT, cwd=source.parent,
        )  # fmt: skip
        if done.returncode != 0 or not out.is_file():
            # protoc's first error at a line of the file (newer protocs name it by its full
            # path); not the warnings its logging library may print first
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            at_line = re.compile(rf"(?:.*/)?({re.escape(source.name)}:\d+:\d+: .*)")
            located = [found[1] for found in map(at_line.fullmatch, lines) if found]
            others = [line for line in lines if not _LOG_LINE.match(line)]
            reason = next(iter(located or others), f"protoc exited with {done.returncode}")
            raise PipelineError(f"--payload-schema {file}: {reason}")
        return out.read_bytes()


def _message(file: Path, descriptor_set: bytes, wanted: str | None) -> str:
    """The full name of the payload's message: ``wanted`` found, or the file's first."""
    from google.protobuf.descriptor_pb2 import DescriptorProto, FileDescriptorSet

    files = FileDescriptorSet.FromString(descriptor_set).file
    own = next(proto for proto in files if proto.name == file.name)  # imports come first
    prefix = f"{own.package}." if own.package else ""
    names: list[str] = []

    def collect(message: DescriptorProto, scope: str) -> None:
        names.append(f"{scope}{message.name}")
        for nested in message.nested_type:
            if not nested.options.map_entry:
                collect(nested, f"{scope}{message.name}.")

    for message in own.message_type:
        collect(message, prefix)
    if not names:
        raise PipelineError(f"--payload-schema {file}: declares no message")
    if wanted is None:
        return names[0]
    for candidate in (wanted.lstrip("."), f"{prefix}{wanted}"):
        if candidate in names:
            return candidate
    known = ", ".join(name.removeprefix(prefix) for name in names)
    raise PipelineError(f"--payload-message {wanted}: no such message in {file} ({known})")
