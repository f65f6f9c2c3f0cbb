"""What a failed compile or launch becomes: a Status and a short message (failures are data)."""

from __future__ import annotations

from dataclasses import dataclass

from costtune.types import Status


@dataclass
class CompileResult:
    status: Status
    seconds: float
    error: str = ""


def classify_error(exc: BaseException) -> Status:
    """Map a compile or launch exception to a Status (failures are data, not crashes)."""
    from triton.runtime.errors import OutOfResources, PTXASError

    if isinstance(exc, OutOfResources):
        return Status.OUT_OF_RESOURCES
    if isinstance(exc, PTXASError) or "ptxas" in str(exc).lower():
        return Status.PTXAS_ERROR
    if "out of resource" in str(exc).lower():
        return Status.OUT_OF_RESOURCES
    return Status.COMPILE_ERROR


def error_text(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[:limit] + " ..."
